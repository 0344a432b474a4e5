package streamer_test

import (
	"context"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/schema/queries"
	"github.com/inlet-dev/inlet/streamer"
)

// The main claim commits asynchronously (asyncCommit), and it passes over
// ordered handlers by the list the streamer read last (every LeasedRecount):
// a handler ordered since then has its keyed jobs leased by the main claim.
// Such a claim commits synchronously after all (syncIfKeyed): a crash must
// not undo it while its handler may run, or a later job of the key would be
// leased beside it (as TestACrashDoesNotUndoAnOrderedClaim proves for the
// ordered loop).
func TestAMainClaimOfAKeyedJobIsSynchronous(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, crash := crashableDatabase(t)
	b := setupOn(t, url)
	// The streamer reads its lists now, before the handler is ordered, and
	// not again within the test.
	s := b.newStreamer(t, streamer.Config{LeaseDuration: 5 * time.Minute, LeasedRecount: time.Hour})
	if _, err := s.ClaimOnce(ctx); err != nil {
		t.Fatal(err)
	}
	b.ordered(t, "block")
	base := time.Now().Add(-time.Hour)
	b.event(t, "a2", "sub_A", base, 2)
	crash.holdWAL(t, b)
	c := b.collect(t, "ordered")
	if _, err := s.ClaimOnce(ctx); err != nil {
		t.Fatal(err)
	}
	ref := c.wait(t, 1, 10*time.Second)[0]
	read, err := queries.New(b.admin).FetchJobs(ctx, queries.FetchJobsParams{Column1: []int64{ref.JobID}, Column2: []int32{int32(ref.Attempt)},
		Column3: []string{ref.Handler}, Column4: []int64{ref.EventID}, Column5: []time.Time{ref.EventReceivedAt}, Column6: []time.Time{ref.LeasedAt}})
	if err != nil || len(read) != 1 {
		t.Fatalf("consumer's read of a2's lease: %d rows, %v", len(read), err)
	}
	crash.now(t)
	b = setupOn(t, url)
	b.event(t, "a1", "sub_A", base, 1)
	s = b.newStreamer(t, streamer.Config{LeaseDuration: 5 * time.Minute})
	if got := b.leaseRound(t, s); time.Now().Before(ref.LeaseExpiresAt) && len(got) > 0 {
		t.Fatalf("the main claim's lease of a2 (its handler newly ordered) was undone by the crash: %v of the same key leased beside it", got)
	}
}
