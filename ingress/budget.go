package ingress

import (
	"context"
	"sync/atomic"

	"golang.org/x/sync/semaphore"
)

// headBytes is the first part of a body, read before the rest is given room:
// a sender must deliver it (or its whole body, if smaller) within
// headTimeout. Most webhooks fit in it whole.
const headBytes = 16 << 10

// budget bounds the body bytes ingress holds at once
// (ingress.max_inflight_bytes). A request reserves room before it reads: the
// head of its body first, the rest once the head has arrived, so a sender
// that declares a large body and sends it slowly holds a head's room, not
// its whole body's, until it is cut off. The room held by heads not yet
// read, or read and waiting for the rest, is itself bounded (heads), which
// leaves the rest of the budget to bodies that have shown they are arriving:
// whatever the concurrency, requests past the budget wait unread, and those
// reserving the rest can always be served, so waiting ones never block each
// other for good.
//
// Both semaphores serve waiters in arrival order, so a large body is not
// passed over forever by a stream of small ones.
type budget struct {
	size int64
	sem  *semaphore.Weighted
	used atomic.Int64 // for the inflight_bytes gauge

	// headsSize is the most of size held by heads (headBytes each, or the
	// whole of a smaller body) from their reservation until their body is
	// whole or its rest is reserved.
	headsSize int64
	heads     *semaphore.Weighted
	headsUsed atomic.Int64
}

// newBudget is a budget of size bytes for bodies of at most maxBody bytes.
// Heads get an eighth of it, at least one head's room, and at most what
// leaves a whole largest body room beside them.
func newBudget(size, maxBody int64) *budget {
	heads := max(size/8, min(headBytes, size))
	if maxBody > 0 {
		heads = min(heads, max(size-maxBody+headBytes, min(headBytes, size)))
	}
	return &budget{size: size, sem: semaphore.NewWeighted(size), headsSize: heads, heads: semaphore.NewWeighted(heads)}
}

// acquire reserves n bytes (at most the whole budget), waiting in line until
// they are free or ctx ends. It returns what it reserved, for release, and
// whether it had to wait.
func (b *budget) acquire(ctx context.Context, n int64) (reserved int64, waited bool, err error) {
	n = max(0, min(n, b.size))
	if b.sem.TryAcquire(n) {
		b.used.Add(n)
		return n, false, nil
	}
	if err := b.sem.Acquire(ctx, n); err != nil {
		return 0, true, err
	}
	b.used.Add(n)
	return n, true, nil
}

// release returns n reserved bytes.
func (b *budget) release(n int64) {
	if n <= 0 {
		return
	}
	b.used.Add(-n)
	b.sem.Release(n)
}

// acquireHead reserves room for a head of n bytes (at most headBytes): a
// place among the heads, then the bytes in the budget. It returns what it
// reserved in each, for releaseHead and release.
func (b *budget) acquireHead(ctx context.Context, n int64) (head int64, waited bool, err error) {
	n = max(0, min(n, headBytes, b.headsSize))
	w1 := false
	if !b.heads.TryAcquire(n) {
		if err := b.heads.Acquire(ctx, n); err != nil {
			return 0, true, err
		}
		w1 = true
	}
	b.headsUsed.Add(n)
	if _, w2, err := b.acquire(ctx, n); err != nil {
		b.releaseHead(n)
		return 0, true, err
	} else {
		return n, w1 || w2, nil
	}
}

// releaseHead gives back a place among the heads (the bytes stay reserved
// in the budget until release).
func (b *budget) releaseHead(n int64) {
	if n <= 0 {
		return
	}
	b.headsUsed.Add(-n)
	b.heads.Release(n)
}

// inUse is the bytes reserved now.
func (b *budget) inUse() int64 { return b.used.Load() }
