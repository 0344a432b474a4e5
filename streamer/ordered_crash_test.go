package streamer_test

import (
	"context"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/schema/queries"
	"github.com/inlet-dev/inlet/streamer"
)

// Regression test for a defect found by review helper-99 (fixed: the claims
// of ordered and limited handlers are synchronous; the text below describes
// the behaviour before the fix).
//
// The claim of an ordered handler commits asynchronously
// (apart.go:227 queues asyncCommit before ClaimHandlerJobs; streamer.go:490).
// A consumer reads the lease (FetchJobs is read-only: it flushes nothing) and
// starts the handler of job a2 (entity sub_A). The database server crashes
// before the WAL writer flushed the claim: the lease is undone, order_lanes
// no longer says a job of sub_A is running. After the restart a late event
// a1 of sub_A (occurred earlier) arrives, and the next claim leases it at
// once — while a2's handler, started before the crash, is still running
// (its lease, as the consumer holds it, is minutes from expiry). Two jobs of
// one entity run at the same time, which docs/pipeline.md "Ordered delivery
// per entity" rules out: "a key's jobs run one at a time … [a late event]
// waits until that one leaves leased (completed, failed, dead-lettered, or
// its lease given back or expired)". Before 323f6ca the lease survived the
// crash and a1 waited for it.
//
// Expected: a lease that a consumer may already be acting on survives a
// crash, so a1 waits until a2's lease ends.
func TestACrashDoesNotUndoAnOrderedClaim(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, crash := crashableDatabase(t)

	b := setupOn(t, url)
	b.ordered(t, "block")
	base := time.Now().Add(-time.Hour)
	b.event(t, "a2", "sub_A", base, 2) // committed synchronously, as ingress does

	crash.holdWAL(t, b)
	c := b.collect(t, "ordered")
	s := b.newStreamer(t, streamer.Config{LeaseDuration: 5 * time.Minute})
	if _, err := s.ClaimOnce(ctx); err != nil {
		t.Fatal(err)
	}
	ref := c.wait(t, 1, 10*time.Second)[0]
	// The consumer's read: the lease is current, so the handler of a2 starts.
	read, err := queries.New(b.admin).FetchJobs(ctx, queries.FetchJobsParams{Column1: []int64{ref.JobID}, Column2: []int32{int32(ref.Attempt)},
		Column3: []string{ref.Handler}, Column4: []int64{ref.EventID}, Column5: []time.Time{ref.EventReceivedAt}, Column6: []time.Time{ref.LeasedAt}})
	if err != nil || len(read) != 1 || read[0].ExternalEventID == nil || *read[0].ExternalEventID != "a2" {
		t.Fatalf("consumer's read of a2's lease: %d rows, %v", len(read), err)
	}
	handlerRunsUntil := ref.LeaseExpiresAt // it runs (and would extend) within its lease

	crash.now(t)
	b = setupOn(t, url)
	// A provider's late delivery of an earlier event of the same entity.
	b.event(t, "a1", "sub_A", base, 1)
	s = b.newStreamer(t, streamer.Config{LeaseDuration: 5 * time.Minute})
	got := b.leaseRound(t, s)
	if time.Now().Before(handlerRunsUntil) && len(got) > 0 {
		t.Fatalf("after a crash undid the claim of a2, whose handler a consumer started before the crash and may run until %s, "+
			"the claim leased %v of the same entity sub_A at once: two jobs of one key run at the same time", handlerRunsUntil.Format(time.RFC3339), got)
	}
}
