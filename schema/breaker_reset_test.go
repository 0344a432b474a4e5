package schema_test

import (
	"context"
	"testing"
	"time"

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
	pool := pgtest.NewPool(t)
	failures, interval := int32(3), time.Hour
	breakerSetup(t, pool, "brk", 4, queries.UpsertHandlerLimitsParams{BreakerFailures: &failures, BreakerProbeInterval: &interval})
	jobs := claimLimitedAs(t, pool, "brk")
	if len(jobs) != 4 {
		t.Fatalf("claimed %d of 4 jobs", len(jobs))
	}
	// The success commits; three failures after it (each transaction
	// begins later): open.
	ok := jobs[0]
	breakerComplete(t, pool, ok)
	for _, j := range jobs[1:] {
		breakerFailJob(t, pool, "brk", j)
	}
	if c, n := breakerState(t, pool, "brk"); c != "open" || n != 3 {
		t.Fatalf("after 3 failures: circuit %s, %d failures; want open, 3", c, n)
	}
	// The success's reset lands now.
	breakerReset(t, pool, "brk", ok)
	if c, n := breakerState(t, pool, "brk"); c != "open" || n != 3 {
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
	breakerComplete(t, pool, probe[0])
	if r := breakerReset(t, pool, "brk", probe[0]); r.Was == "closed" || r.Now != "closed" {
		t.Errorf("reset after the probe succeeded: was %q, now %q; want closed from open or half_open", r.Was, r.Now)
	}
	if c, n := breakerState(t, pool, "brk"); c != "closed" || n != 0 {
		t.Fatalf("after the probe succeeded: circuit %s, %d failures; want closed, 0", c, n)
	}
}
