package reporter_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/internal/testwait"
	"github.com/inlet-dev/inlet/reporter"
)

// TestLateAttemptsStarvedByTheGapBudget proves that committed attempts
// of a late transaction are never reported when the transaction's ids are
// not one contiguous run, although the transaction commits well within
// GapTTL.
//
// Regression test (review helper-208; this describes the code before the
// fix, and it failed then: 88 of 120 records). Defect: docs/operations.md
// ("Control plane (optional)") promises "An attempt whose transaction commits after a later one's is picked up for 10
// minutes by a running reporter, however many attempts that transaction
// holds". A transaction's ids are one run only if nothing else drew from the
// sequence meanwhile; under load (a reaper pass or a replay while consumers
// complete jobs, two streamers' reaper passes) they interleave with
// committed ids, and each becomes a run (gap) of its own. readGaps
// (reporter/reporter.go, budget := BatchSize/2, one look of limit >= 1 per
// gap) looks at most BatchSize/2 gaps per round, and a round in which gap
// looks found records sets r.more only when one gap held more than its look
// took (reporter.go "if int64(len(read)) == l.limit && l.limit <=
// g.hi-g.lo"), never because gaps were left unlooked for lack of budget. So
// run() waits the full Interval after each BatchSize/2 found gaps, and only
// (GapTTL/Interval)·BatchSize/2 gaps are ever looked at within GapTTL of
// their noting; the rest expire and their committed attempts are lost for
// good (the cursor is past them; a restart looks back only 1,000 ids).
// Here: batch_size 4, interval 200ms, GapTTL 3s (the same shape as
// batch_size: 50, interval: 10s and the 10 minutes: 25 gaps a round, 1,500
// in 10 minutes, less than a 2,000-attempt reaper pass interleaved with
// completions), 60 single-id gaps committed right after the cursor passed
// them: at most ~32 can be found before they expire.
//
// Expected: every attempt of the late transaction is reported, as the docs
// say, whatever batch_size and interval are.
//
// Fixed: readGaps looks for every live gap each round, in one statement
// per 1,000 gaps (ReporterAttemptsInRuns), and a round whose look filled
// its budget is followed at once.
func TestLateAttemptsStarvedByTheGapBudget(t *testing.T) {
	t.Parallel()
	d, cp := newDataPlane(t), newControlPlane(t)
	ctx := context.Background()
	const k = 60
	slow := d.job(t)
	fast := make([]int64, k)
	for i := range fast {
		fast[i] = d.job(t)
	}
	// One transaction (a reaper pass, a replay) whose attempts' ids
	// interleave with completions committed meanwhile by consumers.
	tx, err := d.super.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(ctx) })
	for i := range k {
		if _, err := tx.Exec(ctx, insertAttempt, slow, i+1, nil, time.Now(), "lease_expired", "lease_expired", "lease expired"); err != nil {
			t.Fatal(err)
		}
		d.complete(t, d.super, fast[i], 1)
	}
	const ttl = 3 * time.Second
	startReporter(t, d, cp, func(c *reporter.Config) {
		c.BatchSize, c.Interval, c.GapTTL = 4, 200*time.Millisecond, ttl
	})
	cp.waitStored(t, k) // every committed completion reported: the cursor passed all 60 late ids
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	committed := time.Now()

	want := d.attemptIDs(t)
	var got []int64
	testwait.Eventually(t, ttl+5*time.Second, "all attempts reported", func() (bool, string) {
		got = got[:0]
		for _, r := range cp.rows(t) {
			got = append(got, r.attemptID)
		}
		return len(got) == len(want), fmt.Sprintf("%d of %d records", len(got), len(want))
	})
	if !slices.Equal(got, want) {
		t.Fatalf("control plane holds %d attempts, data plane has %d (the late transaction committed %s after the cursor passed it, within GapTTL %s)",
			len(got), len(want), time.Since(committed).Round(time.Millisecond), ttl)
	}
}
