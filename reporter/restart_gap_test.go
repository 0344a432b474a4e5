package reporter_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/internal/testwait"
	"github.com/inlet-dev/inlet/reporter"
)

// TestARestartKeepsALateCommittedAttempt proves that an attempt whose
// transaction committed out of id order is lost for good when the reporter
// restarts, although it was committed (and even already read and sent, just
// not acknowledged) before the restart.
//
// Regression test (review helper-97; fixed: the text describes the behaviour
// before the fix). the reporter remembers the ids its cursor passed while their
// transaction was still open (its "gaps") only in memory (Reporter.gaps), and
// at start it resumes after the control plane's cursor, which is
// max(attempt_id) held for the tenant (controlplane/queries.sql "Cursor").
// Any attempt below that max that the control plane does not hold is never
// looked for again. Reporter.Stop's doc says "Records not yet acknowledged are
// sent again by the next start", and docs/operations.md only concedes the loss
// of an attempt "still uncommitted when the reporter restarts"; here the
// attempt was committed and its record had already been sent (unacknowledged)
// before the stop, and it is never stored.
//
// Expected: after a restart, every committed attempt the control plane does
// not hold is reported, once.
func TestARestartKeepsALateCommittedAttempt(t *testing.T) {
	t.Parallel()
	d, cp := newDataPlane(t), newControlPlane(t)
	ctx := context.Background()
	slow, fast := d.job(t), d.job(t)
	rep := startReporter(t, d, cp, nil)

	// The slow attempt takes its id first but commits last.
	tx, err := d.super.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(ctx) })
	if _, err := tx.Exec(ctx, insertAttempt, slow, 1, "worker-1", time.Now(), "failed", "timeout", errorText); err != nil {
		t.Fatal(err)
	}
	d.complete(t, d.super, fast, 1)
	cp.waitStored(t, 1) // the cursor passed the slow attempt's id

	// The control plane goes away; the slow attempt commits; the running
	// reporter finds it in its gap and tries to send it (unacknowledged).
	cp.down.Store(true)
	refused := cp.refused.Load()
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	cp.waitRequests(t, "the late attempt sent while the control plane is down", &cp.refused, refused, 1)

	// Restart the reporter, the control plane back.
	rep.Stop()
	cp.down.Store(false)
	startReporter(t, d, cp, nil)

	// A new attempt after the restart: the new reporter is past its cursor.
	later := d.job(t)
	d.complete(t, d.super, later, 1)
	testwait.Eventually(t, 20*time.Second, "the attempt after the restart stored", func() (bool, string) {
		for _, r := range cp.rows(t) {
			if r.job == reporter.OpaqueJobID([]byte(hmacKey), later) {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d records", len(cp.rows(t)))
	})
	// Give the new reporter many more rounds (Interval is 30ms).
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		for _, r := range cp.rows(t) {
			if r.job == reporter.OpaqueJobID([]byte(hmacKey), slow) {
				return // reported: no defect
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("the slow job's failed attempt (committed before the restart, sent unacknowledged before it) "+
		"was never reported: control plane holds %d records, data plane has %d attempts %v",
		len(cp.rows(t)), len(d.attemptIDs(t)), d.attemptIDs(t))
}
