package schema_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/internal/pgtest"
	"github.com/inlet-dev/inlet/schema/queries"
)

// TestClaimsPassOverALockedJob: guarantee (design, streamer:
// "claims due jobs in ONE statement (UPDATE … FROM (SELECT … FOR UPDATE
// SKIP LOCKED LIMIT n) … RETURNING)"; "any number of replicas cooperate"):
// a claim never waits for a job row another transaction holds (another
// streamer's claim, the reaper, a consumer's outcome or its handler's
// transaction); it leases the other due jobs and leaves that one.
//
// Mutant (helper-238): schema/migrations/061_claims_hold_new_limits.up.sql,
// claim_handler_jobs, its candidate SELECT's `FOR UPDATE OF j SKIP LOCKED`
// changed to `FOR UPDATE OF j`. The claim of an ordered handler (and of a
// handler claimed apart for its room) then queued behind any transaction
// holding one of the handler's rows: a consumer's long transactional
// handler stalled every claim of its handler, and two streamers' claims of
// one handler serialised. The whole schema package and the streamer's
// order tests passed with it: the plan tests look for "SKIP LOCKED" in the
// plans of claim_jobs only, and no test held a row lock across a call of
// claim_handler_jobs (orderlanes_test holds one across the claim paths to
// check order, where a blocking claim still waits and then returns the
// rows it expects). This test holds one job's row lock and asks each claim
// path, with lock_timeout set, for the handler's jobs: each must lease the
// other job at once, never fail with a lock timeout.
func TestClaimsPassOverALockedJob(t *testing.T) {
	t.Parallel()
	ids := func(n int, id func(int) int64) []int64 {
		out := make([]int64, 0, n)
		for i := range n {
			out = append(out, id(i))
		}
		return out
	}
	paths := map[string]struct {
		limited bool
		claim   func(ctx context.Context, q *queries.Queries) ([]int64, error)
	}{
		"walk": {claim: func(ctx context.Context, q *queries.Queries) ([]int64, error) {
			rows, err := q.ClaimJobs(ctx, queries.ClaimJobsParams{FullHandlers: []string{}, BatchSize: 100,
				LeaseHolder: "survivor-238", LeaseFor: time.Minute})
			return ids(len(rows), func(i int) int64 { return rows[i].ID }), err
		}},
		"by handler": {claim: func(ctx context.Context, q *queries.Queries) ([]int64, error) {
			rows, err := q.ClaimJobs(ctx, queries.ClaimJobsParams{FullHandlers: []string{"someone-else"}, BatchSize: 100,
				LeaseHolder: "survivor-238", LeaseFor: time.Minute})
			return ids(len(rows), func(i int) int64 { return rows[i].ID }), err
		}},
		"handler apart": {claim: func(ctx context.Context, q *queries.Queries) ([]int64, error) {
			rows, err := q.ClaimHandlerJobs(ctx, queries.ClaimHandlerJobsParams{Handler: "h", BatchSize: 100,
				LeaseHolder: "survivor-238", LeaseFor: time.Minute})
			return ids(len(rows), func(i int) int64 { return rows[i].ID }), err
		}},
		"limited": {limited: true, claim: func(ctx context.Context, q *queries.Queries) ([]int64, error) {
			rows, err := q.ClaimLimitedJobs(ctx, queries.ClaimLimitedJobsParams{Handler: "h", BatchSize: 100,
				LeaseHolder: "survivor-238", LeaseFor: time.Minute})
			return ids(len(rows), func(i int) int64 { return rows[i].ID }), err
		}},
	}
	for name, path := range paths {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			pool := pgtest.NewPool(t)
			setup := []string{
				`INSERT INTO webhook_ingress.subscriptions (handler, provider_pattern) VALUES ('h', 'stripe')`,
				`INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, raw_body, signature_verified)
				 SELECT 'stripe', 'stripe', 'evt_survivor238_' || n, '{}', true FROM generate_series(1, 2) n`,
			}
			if path.limited {
				setup = append(setup, `INSERT INTO webhook_ingress.handler_limits (handler, max_in_flight) VALUES ('h', 100)`)
			}
			for _, sql := range setup {
				if _, err := pool.Exec(ctx, sql); err != nil {
					t.Fatalf("%s: %v", sql, err)
				}
			}
			var pending int
			if err := pool.QueryRow(ctx, `SELECT count(*) FROM webhook_ingress.jobs WHERE handler = 'h' AND status = 'pending'`).Scan(&pending); err != nil || pending != 2 {
				t.Fatalf("%d pending jobs of h, want 2: %v", pending, err)
			}

			// Another transaction holds the oldest job's row, as another
			// claim, the reaper or a consumer's outcome does.
			locker, err := pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = locker.Rollback(ctx) }() // rolled back below too; a second rollback does nothing
			var locked int64
			if err := locker.QueryRow(ctx, `SELECT id FROM webhook_ingress.jobs WHERE handler = 'h' ORDER BY id LIMIT 1 FOR UPDATE`).Scan(&locked); err != nil {
				t.Fatal(err)
			}

			conn, err := pool.Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Release()
			// A claim that waits for the lock fails with lock_not_available
			// after this bound instead of hanging; one that skips the row
			// never waits at all, so the bound is no timing assumption.
			if _, err := conn.Exec(ctx, `SET lock_timeout = '10s'`); err != nil {
				t.Fatal(err)
			}
			cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
			defer cancel()
			got, err := path.claim(cctx, queries.New(conn.Conn()))
			if err != nil {
				t.Fatalf("the %s claim waited for the job another transaction holds instead of passing over it: %v", name, err)
			}
			if len(got) != 1 || got[0] == locked {
				t.Fatalf("the %s claim leased %v with job %d locked by another transaction, want the other job alone", name, got, locked)
			}
			if err := locker.Rollback(ctx); err != nil {
				t.Fatal(err)
			}
			var status string
			if err := pool.QueryRow(ctx, `SELECT status FROM webhook_ingress.jobs WHERE id = $1`, locked).Scan(&status); err != nil || status != "pending" {
				t.Fatalf("the locked job is %q after the claims, want pending: %v", status, err)
			}
		})
	}
}

// TestAnotherHandlersFailuresDoNotKeepACircuitOpen: guarantee
// (design, fan-out: "A job is the unit of lease, retry, backoff and
// dead-letter, so handler A failing never retries handler B"; a circuit
// breaker is a handler's own, handler_limits keyed by handler): the breaker
// reset after a handler's success counts that handler's failures since, and
// no other handler's. Handler b failing must not keep handler a's circuit
// open, nor leave a's count of consecutive failures raised.
//
// Mutant (helper-238): schema/migrations/059_breaker_counts_every_role.up.sql,
// handler_failures_since, `WHERE j.handler = p_handler AND a.outcome IN
// ('failed', 'dead_letter')` changed to `WHERE a.outcome IN ('failed',
// 'dead_letter')`: every handler's failures counted for each handler. The
// schema package's breaker tests and the consumers' breaker tests passed:
// each of them has a single handler with failures (or, for 059's own
// TestHandlerFailuresSinceIsOwnHandlersOnly, checks only that a role may
// not ask about another role's handler, never what the count includes).
// With the mutant, a's successful probe left a's circuit open (b's three
// failures counted as a's), so a's jobs stayed held while only b failed.
func TestAnotherHandlersFailuresDoNotKeepACircuitOpen(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	if _, err := pool.Exec(ctx, `INSERT INTO webhook_ingress.subscriptions (handler, provider_pattern) VALUES ('a', 'stripe'), ('b', 'stripe')`); err != nil {
		t.Fatal(err)
	}
	failures, interval := int32(2), time.Hour
	for _, h := range []string{"a", "b"} {
		if _, err := queries.New(pool).UpsertHandlerLimits(ctx, queries.UpsertHandlerLimitsParams{Handler: h,
			BreakerFailures: &failures, BreakerProbeInterval: &interval}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := pool.Exec(ctx, `INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, raw_body, signature_verified)
		SELECT 'stripe', 'stripe', 'evt_survivor238_' || g, '{}', true FROM generate_series(1, 3) g`); err != nil {
		t.Fatal(err)
	}
	a := claimLimitedAs(t, pool, "a")
	if len(a) != 3 {
		t.Fatalf("claimed %d of a's 3 jobs", len(a))
	}
	// a's first two attempts fail: a's circuit opens.
	breakerFailJob(t, pool, "a", a[0])
	breakerFailJob(t, pool, "a", a[1])
	if c, n := breakerState(t, pool, "a"); c != "open" || n != 2 {
		t.Fatalf("after a's 2 failures: circuit %s, %d failures; want open, 2", c, n)
	}
	// a's third attempt succeeds (its outcome commits) ...
	breakerComplete(t, pool, a[2])
	// ... and only then every attempt of handler b fails.
	b := claimLimitedAs(t, pool, "b")
	if len(b) != 3 {
		t.Fatalf("claimed %d of b's 3 jobs", len(b))
	}
	for _, j := range b {
		breakerFailJob(t, pool, "b", j)
	}
	if c, _ := breakerState(t, pool, "b"); c != "open" {
		t.Fatalf("after b's 3 failures b's circuit is %s, want open", c)
	}
	// a's reset for its success: nothing of a failed since.
	breakerReset(t, pool, "a", a[2])
	if c, n := breakerState(t, pool, "a"); c != "closed" || n != 0 {
		t.Fatalf("a's reset after its success: circuit %s, %d consecutive failures; want closed, 0 "+
			"(the 3 failures since are handler b's, not a's)", c, n)
	}
	var own int
	if err := pool.QueryRow(ctx, `SELECT webhook_ingress.handler_failures_since('a', '-infinity')`).Scan(&own); err != nil {
		t.Fatal(err)
	}
	if own != 2 {
		t.Fatalf("handler_failures_since('a') = %d, want a's own 2 failures (b has 3)", own)
	}
}

// TestStaleExtensionCannotHoldTheNextLeaseWithTheSameAttemptNumber:
// guarantee (docs/pipeline.md: "(attempt, leased_at) is the lease token:
// every later statement on the job is fenced on it"; a consumer that hung
// cannot act on "a replayed one, whose attempt numbers start again at 1").
// A consumer still extending its hung attempt 1 after the job was replayed
// and leased again as a new attempt 1 must neither push the new lease out
// nor name itself as the new attempt's consumer.
//
// Mutant (helper-238): schema/queries/jobs.sql, ExtendLease (and its copy
// in jobs.sql.go), `AND attempted_at = $4` changed to
// `AND $4::timestamptz IS NOT NULL`: the extension fenced on the attempt
// number alone. The consumers package (all of it, with -race) and the
// schema package passed: the replay tests with a repeated attempt number
// (TestStaleConsumerCannotFinishTheNextLeaseWithTheSameAttemptNumber, the
// tx variants) end the stale attempt at its outcome, which the complete
// and fail statements fence, and never look at what its extensions did
// meanwhile. With the mutant the stale consumer's extensions kept the new
// lease alive for as long as it hung (were the new attempt's consumer to
// die, the reaper would not take the job back), and its worker_id on the
// row made the reaper count the new attempt to the wrong consumer.
func TestStaleExtensionCannotHoldTheNextLeaseWithTheSameAttemptNumber(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	if _, err := pool.Exec(ctx, `INSERT INTO webhook_ingress.subscriptions (handler) VALUES ('h')`); err != nil {
		t.Fatal(err)
	}
	leakInsertEvent(t, pool, "stripe", "evt_survivor238_extend")
	first := onlyJob(t, claimAll(t, pool))
	// The job is replayed (attempts start again) and leased again as a new
	// attempt 1, while the consumer of the first one still hangs.
	if _, err := pool.Exec(ctx, `UPDATE webhook_ingress.jobs SET status = 'pending', attempt_count = 0,
		lease_holder_id = NULL, lease_expires_at = NULL, worker_id = NULL WHERE id = $1`, first.id); err != nil {
		t.Fatal(err)
	}
	second := onlyJob(t, claimAll(t, pool))
	if second.id != first.id || second.attempt != first.attempt || !second.leasedAt.After(first.leasedAt) {
		t.Fatalf("leased again: %+v after %+v; want the same job and attempt number, leased later", second, first)
	}
	var expires time.Time
	if err := pool.QueryRow(ctx, `SELECT lease_expires_at FROM webhook_ingress.jobs WHERE id = $1`, second.id).Scan(&expires); err != nil {
		t.Fatal(err)
	}
	extend := func(j leasedJob, worker string) (*time.Time, error) {
		t.Helper()
		var got *time.Time
		err := asRoleCommit(t, pool, "webhook_worker", func(tx pgx.Tx) error {
			var err error
			got, err = queries.New(tx).ExtendLease(ctx, queries.ExtendLeaseParams{ID: j.id, AttemptCount: j.attempt,
				Column3: time.Hour, AttemptedAt: &j.leasedAt, WorkerID: &worker})
			return err
		})
		return got, err
	}
	// The stale consumer's extension, under the first lease's token.
	if got, err := extend(first, "stale-consumer"); !errors.Is(err, pgx.ErrNoRows) {
		t.Fatalf("the stale attempt's extension: %v, %v; want no row (its lease was lost)", got, err)
	}
	var worker *string
	var now time.Time
	if err := pool.QueryRow(ctx, `SELECT worker_id, lease_expires_at FROM webhook_ingress.jobs WHERE id = $1`, second.id).Scan(&worker, &now); err != nil {
		t.Fatal(err)
	}
	if worker != nil || !now.Equal(expires) {
		t.Fatalf("after the stale extension the new lease has worker %v, expiry %s (was %s); want no worker, the expiry unchanged",
			worker, now, expires)
	}
	// The current token extends.
	if got, err := extend(second, "current-consumer"); err != nil || got == nil || !got.After(expires) {
		t.Fatalf("the current attempt's extension: %v, %v; want the lease pushed out", got, err)
	}
}
