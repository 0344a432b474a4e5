package reporter_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/internal/testwait"
	"github.com/inlet-dev/inlet/reporter"
)

// TestAControlPlaneOutageDoesNotExpireGaps (review helper-138, fixed; this
// describes the code before the fix): a running reporter lost, for good, an
// attempt that committed only moments after a later attempt's id was
// reported, when the control plane then answered errors (was down) for
// longer than GapTTL (10 minutes by default; 1 s here).
//
// Defect: the gaps (ids the cursor passed while their transaction was open)
// aged from when they were noted (gap.since), and readGaps dropped any gap
// older than GapTTL (reporter/reporter.go, readGaps: "if now.Sub(g.since) <=
// r.cfg.GapTTL"). But while the control plane does not answer 2xx,
// Reporter.run sits in r.retry(ctx, "send", ...) with the batch it read
// before the attempt committed, and never looks at its gaps. Once the
// control plane was back, the first read dropped the gap as expired without
// ever having looked for it after its attempt committed. No restart
// happens, so the restart lookback did not help either. docs/operations.md
// says the reporter "retries with backoff, and moves on only after a 2xx"
// and that an attempt committing after a later one's "is picked up for 10
// minutes by a running reporter"; here it committed within a fraction of
// GapTTL and was never reported: the control plane's figures silently
// missed a failed attempt.
//
// Now: gaps age on the reporter's clock, which leaves out the time spent
// retrying a failed read or send, so every attempt that committed within
// GapTTL of its id being passed is reported, however long the control plane
// was unavailable.
func TestAControlPlaneOutageDoesNotExpireGaps(t *testing.T) {
	t.Parallel()
	d, cp := newDataPlane(t), newControlPlane(t)
	ctx := context.Background()
	slow, fast, during := d.job(t), d.job(t), d.job(t)
	const ttl = time.Second
	startReporter(t, d, cp, func(c *reporter.Config) { c.GapTTL = ttl })

	// The slow attempt takes its id first but commits after the fast one.
	tx, err := d.super.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(ctx) })
	if _, err := tx.Exec(ctx, insertAttempt, slow, 1, "worker-1", time.Now(), "failed", "timeout", errorText); err != nil {
		t.Fatal(err)
	}
	d.complete(t, d.super, fast, 1)
	cp.waitStored(t, 1) // the cursor passed the slow attempt's id: a gap now
	noted := time.Now()

	// The control plane goes down; a new attempt is read and its send is
	// refused: the reporter now retries that batch.
	cp.down.Store(true)
	refused := cp.refused.Load()
	d.complete(t, d.super, during, 1)
	cp.waitRequests(t, "the new attempt's send refused", &cp.refused, refused, 1)

	// The slow attempt commits right away, well within GapTTL of its id
	// being passed.
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	committed := time.Now()

	// The outage outlasts GapTTL.
	time.Sleep(ttl + ttl/2)
	cp.down.Store(false)
	duringRef := reporter.OpaqueJobID([]byte(hmacKey), during)
	testwait.Eventually(t, 20*time.Second, "the batch retried during the outage stored", func() (bool, string) {
		for _, r := range cp.rows(t) {
			if r.job == duringRef {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d records", len(cp.rows(t)))
	})

	// Many more rounds (Interval is 30 ms): the slow attempt should come.
	slowRef := reporter.OpaqueJobID([]byte(hmacKey), slow)
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		for _, r := range cp.rows(t) {
			if r.job == slowRef {
				return // reported: no defect
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("the slow job's failed attempt, committed %s after its id was passed (GapTTL %s), was never reported "+
		"after a control plane outage: control plane holds %d records, data plane has attempts %v",
		fmt.Sprint(committed.Sub(noted).Round(time.Millisecond)), ttl, len(cp.rows(t)), d.attemptIDs(t))
}
