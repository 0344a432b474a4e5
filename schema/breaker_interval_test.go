package schema_test

import (
	"context"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/internal/pgtest"
	"github.com/inlet-dev/inlet/schema/queries"
)

// TestShorterProbeIntervalTakesEffectOnAnOpenCircuit (review helper-139,
// fixed; this describes the code before the fix):
//
// Before the fix: shortening a handler's breaker_probe_interval while its circuit
// is open does not bring its next probe closer. UpsertHandlerLimits
// (schema/queries/limits.sql, the ON CONFLICT branch: next_probe_at = CASE
// WHEN excluded.breaker_failures IS NULL THEN NULL ELSE l.next_probe_at END)
// keeps the next_probe_at the old interval set, so an operator whose
// downstream is back and who redeploys the consumer with
// breaker_probe_interval 1s instead of 1h (the range allows up to 24h)
// still gets no probe, and no job, for up to the old interval.
// docs/pipeline.md: "one probe job is leased every interval"; the handler's
// registered interval is 1s, but the next probe is an hour away.
//
// Now: after re-registering with a 1s interval, a probe is leased
// within about 1s (next_probe_at at most now() + the new interval).
// Before: nothing is leased; next_probe_at stays an hour away.
func TestShorterProbeIntervalTakesEffectOnAnOpenCircuit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	failures, hour, second := int32(1), time.Hour, time.Second
	breakerSetup(t, pool, "brk", 3, queries.UpsertHandlerLimitsParams{BreakerFailures: &failures, BreakerProbeInterval: &hour})
	breakerFail(t, pool, "brk") // open, next probe in an hour
	if c, _ := breakerState(t, pool, "brk"); c != "open" {
		t.Fatalf("circuit %s after a failure with breaker_failures 1; want open", c)
	}
	// The consumer is redeployed with a 1s probe interval (its Register's
	// registerLimits).
	if _, err := queries.New(pool).UpsertHandlerLimits(ctx, queries.UpsertHandlerLimitsParams{Handler: "brk",
		BreakerFailures: &failures, BreakerProbeInterval: &second}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond)
	if got := claimLimitedAs(t, pool, "brk"); len(got) != 1 {
		t.Fatalf("1.5s after the probe interval became 1s: %d jobs leased; circuit %s; want one probe (the interval registered is 1s, "+
			"the next probe still follows the old 1h interval)", len(got), reviewCircuit(t, pool, "brk"))
	}
}
