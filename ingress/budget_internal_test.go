package ingress

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

// Heads get an eighth of the budget, at least one head's room, and never so
// much that the rest of a largest body could not be reserved while every
// head's room is held: a request waiting for its rest always gets it once the
// bodies ahead of it are done.
func TestBudgetLeavesRoomForTheRestOfALargestBody(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ size, maxBody, heads int64 }{
		{32 << 20, 1 << 20, 4 << 20},
		{64 << 10, 64 << 10, 16 << 10},
		{64 << 20, 64 << 20, 16 << 10},
		{8 << 10, 8 << 10, 8 << 10},
		{40 << 20, 36 << 20, 4<<20 + 16<<10},
	} {
		b := newBudget(c.size, c.maxBody)
		if b.headsSize != c.heads {
			t.Errorf("budget %d, max body %d: heads %d, want %d", c.size, c.maxBody, b.headsSize, c.heads)
		}
		if rest := c.maxBody - min(headBytes, c.maxBody); b.size-b.headsSize < rest {
			t.Errorf("budget %d, max body %d: %d left beside the heads, a largest body's rest needs %d", c.size, c.maxBody, b.size-b.headsSize, rest)
		}
	}
}

// Many requests at once, each reserving a head, reading, then reserving its
// rest (as readBody does), with no deadline: every one gets its room in the
// end (none waits for good), the bytes reserved never exceed the budget nor
// the heads' their share, and all is given back.
func TestBudgetServesEveryWaiterWithinItsSize(t *testing.T) {
	t.Parallel()
	const size, maxBody, requests = 1 << 20, 256 << 10, 1000
	b := newBudget(size, maxBody)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var peak, peakHeads int64
	note := func() {
		mu.Lock()
		peak, peakHeads = max(peak, b.inUse()), max(peakHeads, b.headsUsed.Load())
		mu.Unlock()
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for range requests {
		wg.Go(func() {
			want := 1 + rand.Int64N(maxBody)
			head, _, err := b.acquireHead(ctx, want)
			if err != nil {
				t.Errorf("head: %v", err)
				return
			}
			note()
			held := head
			if want > head {
				rest, _, err := b.acquire(ctx, want-head)
				if err != nil {
					t.Errorf("rest: %v", err)
					b.releaseHead(head)
					b.release(held)
					return
				}
				held += rest
			}
			b.releaseHead(head)
			note()
			time.Sleep(time.Duration(rand.IntN(200)) * time.Microsecond) // the work a request does while holding its bytes (verify and store)
			b.release(held)
		})
	}
	wg.Wait()
	if peak > size || peakHeads > b.headsSize {
		t.Errorf("peak %d reserved (budget %d), %d in heads (share %d)", peak, size, peakHeads, b.headsSize)
	}
	if b.inUse() != 0 || b.headsUsed.Load() != 0 {
		t.Errorf("%d still reserved, %d in heads", b.inUse(), b.headsUsed.Load())
	}
	t.Logf("%d requests up to %d KiB, budget %d KiB: peak %d KiB reserved, %d KiB in heads", requests, maxBody>>10, size>>10, peak>>10, peakHeads>>10)
}
