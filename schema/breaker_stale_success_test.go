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

// A failure that began before the newest success and is recorded after its
// reset is not counted, also when the reset had nothing else to change.
//
// Regression test (review helper-126; fixed: the text describes the
// behaviour before the fix). HandlerSucceeded (schema/queries/limits.sql) "writes only a row
// with something to change": when the success's recount equals the stored
// count (the common case: 0 failures on a closed circuit) it skips the
// UPDATE, and with it the write of last_success_at. HandlerFailed then
// gates on that stale last_success_at (`now() > coalesce(l.last_success_at,
// '-infinity')`), so a failure whose transaction began BEFORE the handler's
// newest success, but whose HandlerFailed runs after that success's reset
// (it waited for the handler_limits row, which the reset's
// LockHandlerLimits or a streamer's limited claim holds; or it ran on
// another replica), is counted. 056 and HandlerFailed's doc promise the
// opposite: "A failure whose transaction began before the handler's newest
// success (last_success_at) is older than that success: not counted."
//
// Here (breaker_failures 2): failure F's transaction begins (FailJob,
// InsertAttempt); success S completes later and its reset runs (0 failures
// since S, closed: nothing written, last_success_at stays NULL); F's
// HandlerFailed runs and commits: counted (1). One more failure D, the only
// failure after S, the handler's newest success, opens the circuit.
//
// Expected: consecutive_failures is 1 (D), the circuit stays closed (it
// takes breaker_failures consecutive failures after the newest success).
// Got: 2, open.
func TestBreakerResetMovesLastSuccessWhenNothingElseChanges(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	failures, interval := int32(2), time.Hour
	breakerSetup(t, pool, "brk", 3, queries.UpsertHandlerLimitsParams{BreakerFailures: &failures, BreakerProbeInterval: &interval})
	jobs := claimLimitedAs(t, pool, "brk")
	if len(jobs) != 3 {
		t.Fatalf("claimed %d of 3 jobs", len(jobs))
	}
	f, s, d := jobs[0], jobs[1], jobs[2]
	lastSuccess := func() (last *time.Time) {
		t.Helper()
		if err := pool.QueryRow(ctx, `SELECT last_success_at FROM webhook_ingress.handler_limits WHERE handler = 'brk'`).Scan(&last); err != nil {
			t.Fatal(err)
		}
		return last
	}

	// F's failure transaction begins (as the consumer's record does), and
	// has not reached HandlerFailed yet.
	ftx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer ftx.Rollback(ctx)
	if _, err := ftx.Exec(ctx, "SET LOCAL ROLE webhook_worker"); err != nil {
		t.Fatal(err)
	}
	if err := breakerRecordFailure(ctx, ftx, f); err != nil {
		t.Fatalf("F's FailJob/InsertAttempt: %v", err)
	}
	time.Sleep(20 * time.Millisecond) // S's completion begins strictly after F's transaction

	// S succeeds and its reset runs as the consumer's (LockHandlerLimits,
	// HandlerSucceeded).
	breakerComplete(t, pool, s)
	breakerReset(t, pool, "brk", s)
	lastAfterS := lastSuccess()

	// F's HandlerFailed runs now (it had waited for the row) and commits.
	if _, err := queries.New(ftx).HandlerFailed(ctx, "brk"); err != nil && !errors.Is(err, pgx.ErrNoRows) {
		t.Fatalf("F's HandlerFailed: %v", err)
	}
	if err := ftx.Commit(ctx); err != nil {
		t.Fatal(err)
	}

	// D fails after S: the only failure since the handler's newest success.
	breakerFailJob(t, pool, "brk", d)

	c, n := breakerState(t, pool, "brk")
	if c != "closed" || n != 1 {
		t.Errorf("one failure (D) after the handler's newest success S, breaker_failures 2: circuit %s, %d consecutive failures; "+
			"want closed, 1 (F began before S and must not count; S's reset wrote nothing, last_success_at after it: %v)", c, n, lastAfterS)
	}
}
