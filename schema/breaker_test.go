package schema_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inlet-dev/inlet/internal/pgtest"
	"github.com/inlet-dev/inlet/schema/queries"
)

// breakerSetup makes handler h with n due jobs and registers its
// limits as consumers.registerLimits does.
func breakerSetup(t *testing.T, pool *pgxpool.Pool, h string, n int, p queries.UpsertHandlerLimitsParams) {
	t.Helper()
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `INSERT INTO webhook_ingress.subscriptions (handler, provider_pattern) VALUES ($1, 'stripe')`, h); err != nil {
		t.Fatal(err)
	}
	p.Handler = h
	if _, err := queries.New(pool).UpsertHandlerLimits(ctx, p); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, raw_body, signature_verified)
		SELECT 'stripe', 'stripe', 'evt_' || g, '{}', true FROM generate_series(1, $1::int) g`, n); err != nil {
		t.Fatal(err)
	}
}

// claimLimitedAs runs the streamer's limited claim (LockHandlerLimits,
// then ClaimLimitedJobs, one transaction) as webhook_streamer.
func claimLimitedAs(t *testing.T, pool *pgxpool.Pool, h string) []queries.ClaimLimitedJobsRow {
	t.Helper()
	ctx := context.Background()
	var rows []queries.ClaimLimitedJobsRow
	if err := asRoleCommit(t, pool, "webhook_streamer", func(tx pgx.Tx) error {
		if err := queries.New(tx).LockHandlerLimits(ctx, h); err != nil {
			return err
		}
		var err error
		rows, err = queries.New(tx).ClaimLimitedJobs(ctx, queries.ClaimLimitedJobsParams{Handler: h, BatchSize: 100, LeaseHolder: "s", LeaseFor: time.Minute})
		return err
	}); err != nil {
		t.Fatalf("limited claim: %v", err)
	}
	return rows
}

// breakerFail records one failed attempt of h against its breaker as the
// consumer does (HandlerFailed in the failure's transaction).
func breakerFail(t *testing.T, pool *pgxpool.Pool, h string) {
	t.Helper()
	ctx := context.Background()
	if err := asRoleCommit(t, pool, "webhook_worker", func(tx pgx.Tx) error {
		_, err := queries.New(tx).HandlerFailed(ctx, h)
		return err
	}); err != nil {
		t.Fatalf("HandlerFailed: %v", err)
	}
}

func reviewCircuit(t *testing.T, pool *pgxpool.Pool, h string) string {
	t.Helper()
	var circuit, next string
	if err := pool.QueryRow(context.Background(), `SELECT circuit, coalesce(next_probe_at::text, 'NULL') FROM webhook_ingress.handler_limits WHERE handler = $1`, h).
		Scan(&circuit, &next); err != nil {
		t.Fatal(err)
	}
	return circuit + " (next_probe_at " + next + ")"
}

// A consumer that drops BreakerFailures from a handler whose circuit is
// open, keeping another limit (MaxInFlight), re-registers through
// UpsertHandlerLimits: its circuit closes with the breaker, and the claim
// treats a row without a breaker as closed (041). (Found by a review:
// circuit stayed 'open', the next probe set next_probe_at to now() + NULL
// and the circuit to half_open, the quota was 0 from then on, and nothing
// could close it: the handler never got another job.)
func TestBreakerRemovedWhileOpenReopensTheHandler(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	failures, inFlight, interval := int32(1), int32(10), 100*time.Millisecond
	breakerSetup(t, pool, "brk", 4, queries.UpsertHandlerLimitsParams{MaxInFlight: &inFlight, BreakerFailures: &failures, BreakerProbeInterval: &interval})

	breakerFail(t, pool, "brk") // the circuit opens
	// The operator removes the breaker; the in-flight limit stays
	// (consumers.registerLimits: the row is upserted, not deleted).
	if _, err := queries.New(pool).UpsertHandlerLimits(ctx, queries.UpsertHandlerLimitsParams{Handler: "brk", MaxInFlight: &inFlight}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * interval)
	first := claimLimitedAs(t, pool, "brk")
	t.Logf("first claim after the breaker was removed: %d leased; circuit %s", len(first), reviewCircuit(t, pool, "brk"))
	// Whatever was leased succeeds (as the consumer would record it) and,
	// for good measure, the breaker reset runs too.
	for _, j := range first {
		done, err := queries.New(pool).CompleteJobs(ctx, queries.CompleteJobsParams{Column1: []int64{j.ID}, Column2: []int32{j.AttemptCount},
			Column3: []time.Time{j.EventReceivedAt}, Column4: []time.Time{j.AttemptedAt}, Column5: "c"})
		if err != nil || len(done) != 1 {
			t.Fatalf("complete %d: %v %v", j.ID, done, err)
		}
	}
	for _, j := range first {
		_, err := queries.New(pool).HandlerSucceeded(ctx, queries.HandlerSucceededParams{JobID: j.ID, EventReceivedAt: j.EventReceivedAt, Handler: "brk"})
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			t.Fatal(err)
		}
	}
	leased := len(first)
	for i := 0; i < 5; i++ {
		time.Sleep(3 * interval)
		leased += len(claimLimitedAs(t, pool, "brk"))
	}
	if leased != 4 {
		t.Fatalf("handler without a breaker any more: %d of its 4 due jobs leased over %d claims; circuit %s (max_in_flight 10: all 4 should be leased)",
			leased, 6, reviewCircuit(t, pool, "brk"))
	}
}

// Half-open means one probe running (017: "circuit half_open while the probe
// runs"): while a probe is leased, no other is, however long it runs (041).
// (Found by a review: a probe was leased every interval whether or not the
// last still ran; the default interval, 30s, is half the default lease.)
func TestHalfOpenLeasesOneProbeAtATime(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	failures, interval := int32(1), 300*time.Millisecond
	breakerSetup(t, pool, "brk", 5, queries.UpsertHandlerLimitsParams{BreakerFailures: &failures, BreakerProbeInterval: &interval})

	breakerFail(t, pool, "brk") // open
	time.Sleep(interval + 100*time.Millisecond)
	first := claimLimitedAs(t, pool, "brk")
	if len(first) != 1 || !first[0].Probe {
		t.Fatalf("first probe: %d leased (%v), want 1 probe", len(first), first)
	}
	// The probe is still running (leased for a minute, no outcome yet).
	time.Sleep(interval + 100*time.Millisecond)
	second := claimLimitedAs(t, pool, "brk")
	var running int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM webhook_ingress.jobs WHERE handler = 'brk' AND status = 'leased'`).Scan(&running); err != nil {
		t.Fatal(err)
	}
	if len(second) != 0 {
		t.Fatalf("circuit %s with probe job %d still leased: the claim leased %d more probe(s); %d jobs of the half-open handler now run at once",
			reviewCircuit(t, pool, "brk"), first[0].ID, len(second), running)
	}
}

// breakerRecordFailure records attempt j's failure in tx as the consumer's
// record does before its HandlerFailed: FailJob, then its history row.
func breakerRecordFailure(ctx context.Context, tx pgx.Tx, j queries.ClaimLimitedJobsRow) error {
	worker, class, text := "c", "http_5xx", "boom"
	q := queries.New(tx)
	if _, err := q.FailJob(ctx, queries.FailJobParams{ID: j.ID, AttemptCount: j.AttemptCount, LastError: &text, LastErrorClass: &class,
		Column5: time.Hour, AttemptedAt: &j.AttemptedAt, WorkerID: &worker}); err != nil {
		return err
	}
	_, err := q.InsertAttempt(ctx, queries.InsertAttemptParams{ID: j.ID, Attempt: j.AttemptCount, WorkerID: &worker,
		StartedAt: j.AttemptedAt, Outcome: "failed", ErrorClass: &class, Error: &text})
	return err
}

// breakerFailJob records attempt j's failure against h's breaker, as the
// consumer does, in a transaction of its own.
func breakerFailJob(t *testing.T, pool *pgxpool.Pool, h string, j queries.ClaimLimitedJobsRow) {
	t.Helper()
	ctx := context.Background()
	if err := asRoleCommit(t, pool, "webhook_worker", func(tx pgx.Tx) error {
		if err := breakerRecordFailure(ctx, tx, j); err != nil {
			return err
		}
		_, err := queries.New(tx).HandlerFailed(ctx, h)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		return err
	}); err != nil {
		t.Fatalf("record a failure of job %d: %v", j.ID, err)
	}
}

// breakerComplete completes attempt j as the consumer's CompleteJobs does.
func breakerComplete(t *testing.T, pool *pgxpool.Pool, j queries.ClaimLimitedJobsRow) {
	t.Helper()
	done, err := queries.New(pool).CompleteJobs(context.Background(), queries.CompleteJobsParams{Column1: []int64{j.ID}, Column2: []int32{j.AttemptCount},
		Column3: []time.Time{j.EventReceivedAt}, Column4: []time.Time{j.AttemptedAt}, Column5: "c"})
	if err != nil || len(done) != 1 {
		t.Fatalf("complete job %d: %v %v", j.ID, done, err)
	}
}

// breakerReset runs h's breaker reset for success j as the consumer does
// (LockHandlerLimits, then HandlerSucceeded) and returns the circuit before
// and after ("" when nothing changed).
func breakerReset(t *testing.T, pool *pgxpool.Pool, h string, j queries.ClaimLimitedJobsRow) queries.HandlerSucceededRow {
	t.Helper()
	ctx := context.Background()
	var r queries.HandlerSucceededRow
	if err := asRoleCommit(t, pool, "webhook_worker", func(tx pgx.Tx) error {
		q := queries.New(tx)
		if err := q.LockHandlerLimits(ctx, h); err != nil {
			return err
		}
		var err error
		r, err = q.HandlerSucceeded(ctx, queries.HandlerSucceededParams{JobID: j.ID, EventReceivedAt: j.EventReceivedAt, Handler: h})
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		return err
	}); err != nil {
		t.Fatalf("reset for job %d: %v", j.ID, err)
	}
	return r
}

// breakerState is h's circuit and consecutive failures.
func breakerState(t *testing.T, pool *pgxpool.Pool, h string) (circuit string, n int) {
	t.Helper()
	if err := pool.QueryRow(context.Background(), `SELECT circuit, consecutive_failures FROM webhook_ingress.handler_limits WHERE handler = $1`, h).
		Scan(&circuit, &n); err != nil {
		t.Fatal(err)
	}
	return circuit, n
}
