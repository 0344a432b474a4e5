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

// A success's breaker reset that lands after later failures keeps them: the
// circuit they opened stays open and their count stays.
//
// Regression test (review helper-121; fixed: the text describes the
// behaviour before the fix). The consumer resets a handler's breaker after
// its successes commit, in a statement of its own (off the completion
// writer since 7a1fda6, and before that right after the commit). The reset
// set consecutive_failures to 0 and closed the circuit whatever had been
// recorded meanwhile: a reset delayed behind a busy row or pool erased the
// failures recorded after its success, and closed the circuit they had
// opened. HandlerSucceeded now counts the failures recorded since the
// success (failed attempts whose transaction began after its completion's).
func TestBreakerResetAfterLaterFailuresKeepsThem(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	failures, interval := int32(3), time.Hour
	breakerSetup(t, pool, "brk", 4, queries.UpsertHandlerLimitsParams{BreakerFailures: &failures, BreakerProbeInterval: &interval})
	jobs := claimLimitedAs(t, pool, "brk")
	if len(jobs) != 4 {
		t.Fatalf("claimed %d of 4 jobs", len(jobs))
	}
	fail := func(j queries.ClaimLimitedJobsRow) {
		t.Helper()
		worker, class, text := "c", "http_5xx", "boom"
		if err := asRoleCommit(t, pool, "webhook_worker", func(tx pgx.Tx) error {
			q := queries.New(tx)
			if _, err := q.FailJob(ctx, queries.FailJobParams{ID: j.ID, AttemptCount: j.AttemptCount, LastError: &text, LastErrorClass: &class,
				Column5: time.Hour, AttemptedAt: &j.AttemptedAt, WorkerID: &worker}); err != nil {
				return err
			}
			if _, err := q.InsertAttempt(ctx, queries.InsertAttemptParams{ID: j.ID, Attempt: j.AttemptCount, WorkerID: &worker,
				StartedAt: j.AttemptedAt, Outcome: "failed", ErrorClass: &class, Error: &text}); err != nil {
				return err
			}
			_, err := q.HandlerFailed(ctx, "brk")
			return err
		}); err != nil {
			t.Fatalf("record a failure of job %d: %v", j.ID, err)
		}
	}
	state := func() (circuit string, n int) {
		t.Helper()
		if err := pool.QueryRow(ctx, `SELECT circuit, consecutive_failures FROM webhook_ingress.handler_limits WHERE handler = 'brk'`).Scan(&circuit, &n); err != nil {
			t.Fatal(err)
		}
		return circuit, n
	}
	reset := func(j queries.ClaimLimitedJobsRow) {
		t.Helper()
		if err := asRoleCommit(t, pool, "webhook_worker", func(tx pgx.Tx) error {
			q := queries.New(tx)
			if err := q.LockHandlerLimits(ctx, "brk"); err != nil {
				return err
			}
			_, err := q.HandlerSucceeded(ctx, queries.HandlerSucceededParams{JobID: j.ID, EventReceivedAt: j.EventReceivedAt, Handler: "brk"})
			if errors.Is(err, pgx.ErrNoRows) {
				return nil
			}
			return err
		}); err != nil {
			t.Fatalf("reset for job %d: %v", j.ID, err)
		}
	}

	// The success commits.
	ok := jobs[0]
	done, err := queries.New(pool).CompleteJobs(ctx, queries.CompleteJobsParams{Column1: []int64{ok.ID}, Column2: []int32{ok.AttemptCount},
		Column3: []time.Time{ok.EventReceivedAt}, Column4: []time.Time{ok.AttemptedAt}, Column5: "c"})
	if err != nil || len(done) != 1 {
		t.Fatalf("complete job %d: %v %v", ok.ID, done, err)
	}
	// Three failures after it (each transaction begins later): open.
	for _, j := range jobs[1:] {
		fail(j)
	}
	if c, n := state(); c != "open" || n != 3 {
		t.Fatalf("after 3 failures: circuit %s, %d failures; want open, 3", c, n)
	}
	// The success's reset lands now.
	reset(ok)
	if c, n := state(); c != "open" || n != 3 {
		t.Fatalf("a reset for a success before 3 failures, landing after them: circuit %s, %d consecutive failures; "+
			"want open, 3 (nothing succeeded since)", c, n)
	}
}

// A success's reset counts only the failures since that success: failures
// before it are forgiven, the circuit closes.
func TestBreakerResetForgivesEarlierFailures(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	failures, interval := int32(2), time.Hour
	breakerSetup(t, pool, "brk", 1, queries.UpsertHandlerLimitsParams{BreakerFailures: &failures, BreakerProbeInterval: &interval})
	breakerFail(t, pool, "brk")
	breakerFail(t, pool, "brk") // open
	time.Sleep(10 * time.Millisecond)
	if _, err := pool.Exec(ctx, `UPDATE webhook_ingress.handler_limits SET next_probe_at = now() WHERE handler = 'brk'`); err != nil {
		t.Fatal(err)
	}
	probe := claimLimitedAs(t, pool, "brk")
	if len(probe) != 1 {
		t.Fatalf("probe: %d leased", len(probe))
	}
	j := probe[0]
	if done, err := queries.New(pool).CompleteJobs(ctx, queries.CompleteJobsParams{Column1: []int64{j.ID}, Column2: []int32{j.AttemptCount},
		Column3: []time.Time{j.EventReceivedAt}, Column4: []time.Time{j.AttemptedAt}, Column5: "c"}); err != nil || len(done) != 1 {
		t.Fatalf("complete the probe: %v %v", done, err)
	}
	if err := asRoleCommit(t, pool, "webhook_worker", func(tx pgx.Tx) error {
		q := queries.New(tx)
		if err := q.LockHandlerLimits(ctx, "brk"); err != nil {
			return err
		}
		r, err := q.HandlerSucceeded(ctx, queries.HandlerSucceededParams{JobID: j.ID, EventReceivedAt: j.EventReceivedAt, Handler: "brk"})
		if err == nil && (r.Was == "closed" || r.Now != "closed") {
			t.Errorf("reset after the probe succeeded: was %s, now %s; want closed from open or half_open", r.Was, r.Now)
		}
		return err
	}); err != nil {
		t.Fatalf("reset: %v", err)
	}
	var circuit string
	var n int
	if err := pool.QueryRow(ctx, `SELECT circuit, consecutive_failures FROM webhook_ingress.handler_limits WHERE handler = 'brk'`).Scan(&circuit, &n); err != nil {
		t.Fatal(err)
	}
	if circuit != "closed" || n != 0 {
		t.Fatalf("after the probe succeeded: circuit %s, %d failures; want closed, 0", circuit, n)
	}
}
