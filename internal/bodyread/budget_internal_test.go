package bodyread

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Heads get an eighth of the budget, at least one head's room, and never so
// much that the rest of a largest body could not be reserved while every
// head's room is held: a request waiting for its rest always gets it once the
// bodies ahead of it are done.
func TestBudgetLeavesRoomForTheRestOfALargestBody(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ size, maxBody, heads, grow int64 }{
		{32 << 20, 1 << 20, 4 << 20, 27<<20 + 16<<10},
		{64 << 10, 64 << 10, 16 << 10, 0},
		{64 << 20, 64 << 20, 16 << 10, 0},
		{8 << 10, 8 << 10, 8 << 10, 0},
		{40 << 20, 36 << 20, 4<<20 + 16<<10, 0},
		{1 << 20, 256 << 10, 128 << 10, 656 << 10},
	} {
		b := NewBudget(c.size, c.maxBody)
		if b.headsSize != c.heads {
			t.Errorf("budget %d, max body %d: heads %d, want %d", c.size, c.maxBody, b.headsSize, c.heads)
		}
		if rest := c.maxBody - min(headBytes, c.maxBody); b.size-b.headsSize-b.growSize < rest {
			t.Errorf("budget %d, max body %d: %d left beside the heads and growing bodies, a largest body's rest needs %d",
				c.size, c.maxBody, b.size-b.headsSize-b.growSize, rest)
		}
		if b.growSize != c.grow {
			t.Errorf("budget %d, max body %d: growing bodies' share %d, want %d", c.size, c.maxBody, b.growSize, c.grow)
		}
	}
}

// Many requests at once, each reserving a head, reading, then growing its
// room a step at a time while a step is free, else reserving its whole rest
// (as readBody does), with no deadline: every one gets its room in the end
// (none waits for good), the bytes reserved never exceed the budget nor the
// heads' and growing bodies' their shares, and all is given back.
func TestBudgetServesEveryWaiterWithinItsSize(t *testing.T) {
	t.Parallel()
	const size, maxBody, requests = 1 << 20, 256 << 10, 1000
	b := NewBudget(size, maxBody)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var peak, peakHeads, peakGrow int64
	var grew, waited atomic.Int64
	note := func() {
		mu.Lock()
		peak, peakHeads, peakGrow = max(peak, b.InUse()), max(peakHeads, b.headsUsed.Load()), max(peakGrow, b.growUsed.Load())
		mu.Unlock()
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for range requests {
		wg.Go(func() {
			want := 1 + rand.Int64N(maxBody)
			head, _, err := b.acquireHead(ctx, want, 0)
			if err != nil {
				t.Errorf("head: %v", err)
				return
			}
			note()
			held, headPlace, growPlace := head, head, int64(0)
			for held < want {
				step := min(max(restStep, held), want-held)
				if b.tryGrow(step+headPlace, step) {
					growPlace += step + headPlace
					b.releaseHead(headPlace)
					headPlace = 0
					held += step
					grew.Add(1)
					note()
					continue
				}
				rest, _, err := b.acquire(ctx, want-held)
				if err != nil {
					t.Errorf("rest: %v", err)
					b.releaseHead(headPlace)
					b.releaseGrow(growPlace)
					b.Release(held)
					return
				}
				held += rest
				waited.Add(1)
			}
			b.releaseHead(headPlace)
			b.releaseGrow(growPlace)
			note()
			time.Sleep(time.Duration(rand.IntN(200)) * time.Microsecond) // the work a request does while holding its bytes (verify and store)
			b.Release(held)
		})
	}
	wg.Wait()
	if peak > size || peakHeads > b.headsSize || peakGrow > b.growSize {
		t.Errorf("peak %d reserved (budget %d), %d in heads (share %d), %d growing (share %d)", peak, size, peakHeads, b.headsSize, peakGrow, b.growSize)
	}
	if b.InUse() != 0 || b.headsUsed.Load() != 0 || b.growUsed.Load() != 0 {
		t.Errorf("%d still reserved, %d in heads, %d growing", b.InUse(), b.headsUsed.Load(), b.growUsed.Load())
	}
	t.Logf("%d requests up to %d KiB, budget %d KiB: peak %d KiB reserved, %d KiB in heads, %d KiB growing; %d steps taken, %d whole rests waited for",
		requests, maxBody>>10, size>>10, peak>>10, peakHeads>>10, peakGrow>>10, grew.Load(), waited.Load())
}
