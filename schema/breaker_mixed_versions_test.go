package schema_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/internal/pgtest"
	"github.com/inlet-dev/inlet/schema/queries"
)

// oldHandlersSucceeded is the previous version's breaker reset (commit
// ad36342, schema/queries/limits.sql HandlersSucceeded), verbatim but for the
// parameter: what a consumer of that version runs after its successes
// commit, also against a database migrated to 056.
const oldHandlersSucceeded = `UPDATE webhook_ingress.handler_limits l
SET consecutive_failures = 0,
    circuit              = 'closed',
    circuit_changed_at   = CASE WHEN l.circuit <> 'closed' THEN now() ELSE l.circuit_changed_at END,
    next_probe_at        = NULL,
    updated_at           = now()
FROM (SELECT h.handler, h.circuit FROM webhook_ingress.handler_limits h
      WHERE h.handler = ANY($1::text[]) AND h.breaker_failures IS NOT NULL
        AND (h.consecutive_failures > 0 OR h.circuit <> 'closed')
      ORDER BY h.handler FOR UPDATE) AS before
WHERE l.handler = before.handler
RETURNING l.handler, before.circuit AS was`

// During a rolling upgrade to 056, a success of an OLD consumer does not
// protect the breaker from a new consumer's late-reported older success:
// the failures the old success forgave come back, and one more failure
// reopens the circuit.
//
// An old consumer's breaker reset is not undone by a new consumer's late
// success (057).
//
// Regression test (review helper-134; fixed: the text describes the
// behaviour before the fix). 056 makes "consecutive" mean "since the
// handler's newest success" by keeping that success in
// handler_limits.last_success_at, which only the new HandlerSucceeded
// writes. A consumer of the previous version (ad36342), still running
// beside new ones during the rolling upgrade (nothing in docs/pipeline.md's
// "Upgrading from the previous protocol" says otherwise for 054-056), resets
// with HandlersSucceeded: consecutive_failures = 0, circuit closed,
// last_success_at untouched. A new consumer's success that completed BEFORE
// that (a transactional handler's success is dated by its transaction's
// start; any reset is reported after its commit, off the completion writer,
// and may wait for the row) then runs HandlerSucceeded: cur.at =
// greatest(last_success_at, its own completed_at) is its own older time,
// so it recounts every failure since then — those the old consumer's newer
// success had forgiven — and stores them. The circuit stays closed (the
// CASE keeps l.circuit when since.n >= breaker_failures) with
// consecutive_failures >= breaker_failures, and the next single failure
// opens it: the handler's jobs stop (one probe per interval) after one
// failure following a success. With a new consumer in the old one's place,
// the same sequence leaves 1 failure and a closed circuit
// (TestBreakerOlderSuccessDoesNotUndoANewer, review helper-123).
//
// Sequence (breaker_failures 3): S (new consumer) completes; F1..F3 fail
// after it (open, 3); P, a job an OLD consumer had leased before the circuit
// opened, succeeds and its old reset closes the circuit (0); S's late reset
// lands; D fails.
//
// Expected: D is the only failure since the handler's newest success (P):
// circuit closed, 1 consecutive failure. Got: open, 4.
func TestBreakerOldConsumerResetIsNotUndone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	failures, interval := int32(3), time.Hour
	breakerSetup(t, pool, "brk", 6, queries.UpsertHandlerLimitsParams{BreakerFailures: &failures, BreakerProbeInterval: &interval})
	jobs := claimLimitedAs(t, pool, "brk")
	if len(jobs) != 6 {
		t.Fatalf("claimed %d of 6 jobs", len(jobs))
	}
	s, f, p, d := jobs[0], jobs[1:4], jobs[4], jobs[5]

	// S: a new consumer's success commits; its reset is reported later.
	breakerComplete(t, pool, s)
	time.Sleep(10 * time.Millisecond)
	// F1..F3 fail after S: the circuit opens.
	for _, j := range f {
		breakerFailJob(t, pool, "brk", j)
	}
	if c, n := breakerState(t, pool, "brk"); c != "open" || n != 3 {
		t.Fatalf("after 3 failures: circuit %s, %d; want open, 3", c, n)
	}
	time.Sleep(10 * time.Millisecond)
	// P: an OLD consumer's success (a job leased before the circuit
	// opened) and its reset, the previous version's statement.
	breakerComplete(t, pool, p)
	if err := asRoleCommit(t, pool, "webhook_worker", func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, oldHandlersSucceeded, []string{"brk"})
		return err
	}); err != nil {
		t.Fatalf("old consumer's HandlersSucceeded against the 056 schema: %v", err)
	}
	if c, n := breakerState(t, pool, "brk"); c != "closed" || n != 0 {
		t.Fatalf("after the old consumer's success: circuit %s, %d; want closed, 0", c, n)
	}
	// S's reset lands now (new consumer, HandlerSucceeded).
	breakerReset(t, pool, "brk", s)
	cAfterS, nAfterS := breakerState(t, pool, "brk")
	// D fails: the only failure since the newest success, P.
	breakerFailJob(t, pool, "brk", d)

	if c, n := breakerState(t, pool, "brk"); c != "closed" || n != 1 {
		t.Errorf("old consumer's success P after failures F1..F3, then a new consumer's older success S reported late, then one failure D "+
			"(breaker_failures 3): circuit %s with %d consecutive failures; want closed, 1 (only D follows the newest success P). "+
			"S's late reset brought back the failures P forgave: after it circuit %s, %d consecutive failures",
			c, n, cAfterS, nAfterS)
	}
}
