package bodyread

import (
	"context"
	"errors"
	"sync/atomic"

	"golang.org/x/sync/semaphore"
)

// headBytes is the first part of a body, read before the rest is given room:
// a sender must deliver it (or its whole body, if smaller) within
// headTimeout. Most webhooks fit in it whole.
const headBytes = 16 << 10

// restStep is the least room a body past its head is given at a time, and
// how much of it must arrive within headTimeout: a body's room grows as it
// arrives (by what it holds already, at least restStep), so a sender that
// stops holds what it sent plus one step, for headTimeout at most.
const restStep = 64 << 10

// Budget bounds the body bytes a server holds at once (ingress.max_inflight_bytes,
// relay.max_inflight_bytes). A request reserves room before it reads: the
// head of its body first, then the rest a step at a time as it arrives, so a
// sender that declares a large body and sends it slowly holds about what it
// sent, not its whole body's room, until it is cut off. The room held by
// heads (not yet read, or read and waiting for their rest) is bounded
// (heads), and so is the room of bodies growing step by step (grow); a body that finds no step free at once waits, as
// before, for the whole of its rest, which the budget left beside both shares
// always covers: whatever the concurrency, requests past the budget wait
// unread, and those reserving their rest can always be served, so waiting
// ones never block each other for good.
//
// A request's head reservation also holds what net/http read for it before
// the body (its headers and its connection's buffers: requestCost), for as
// long as the request runs, so a request that sends headers and no body
// holds its headers within the budget. Requests waiting for a head's room
// hold those too, outside the budget: they are bounded by the waiting share
// (half the budget, each waiter's requestCost a place in it), and a request
// that finds no place there is refused at once rather than queued, so
// connections opened by the thousand cannot grow the memory held for them.
//
// The semaphores serve waiters in arrival order, so a large body is not
// passed over forever by a stream of small ones.
type Budget struct {
	size int64
	sem  *semaphore.Weighted
	used atomic.Int64 // for the inflight_bytes gauge

	// headsSize is the most of size held by heads (headBytes each, or the
	// whole of a smaller body) from their reservation until their body is
	// whole or its rest is reserved.
	headsSize int64
	heads     *semaphore.Weighted
	headsUsed atomic.Int64

	// growSize is the most of size held by bodies past their head whose
	// room grows step by step (their head's room included), from their
	// first step until they are whole or their whole rest is reserved. It
	// is what size leaves beside the heads and a largest body's rest: zero
	// when that is nothing, and then every body reserves its whole rest
	// once its head has arrived.
	growSize int64
	grow     *semaphore.Weighted
	growUsed atomic.Int64
	// waitSize bounds the requestCost of the requests waiting for a head's
	// room (never waited for: no place, no wait).
	waitSize int64
	waiting  *semaphore.Weighted
}

// errNoRoomToWait is a request that found no room for its head and no
// place among those waiting for it: refused at once (Overloaded).
var errNoRoomToWait = errors.New("no room to wait for: the waiting share is full")

// NewBudget is a budget of size bytes for bodies of at most maxBody bytes.
// Heads get an eighth of it, at least one head's room, and at most what
// leaves a whole largest body room beside them; growing bodies get what is
// left beside the heads and a largest body's rest (nothing when maxBody is
// not set). Requests waiting for a head's room may hold half of size more
// (see Budget).
func NewBudget(size, maxBody int64) *Budget {
	heads := max(size/8, min(headBytes, size))
	var grow int64
	if maxBody > 0 {
		heads = min(heads, max(size-maxBody+headBytes, min(headBytes, size)))
		largestRest := max(0, min(maxBody, size)-min(headBytes, heads))
		grow = max(0, size-heads-largestRest)
	}
	wait := max(size/2, 1)
	return &Budget{size: size, sem: semaphore.NewWeighted(size), headsSize: heads, heads: semaphore.NewWeighted(heads),
		growSize: grow, grow: semaphore.NewWeighted(grow), waitSize: wait, waiting: semaphore.NewWeighted(wait)}
}

// acquire reserves n bytes (at most the whole budget), waiting in line until
// they are free or ctx ends. It returns what it reserved, for release, and
// whether it had to wait.
func (b *Budget) acquire(ctx context.Context, n int64) (reserved int64, waited bool, err error) {
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

// Release returns n reserved bytes.
func (b *Budget) Release(n int64) {
	if n <= 0 {
		return
	}
	b.used.Add(-n)
	b.sem.Release(n)
}

// acquireHead reserves room for a head of n bytes (at most headBytes) and
// for cost, what the request holds beside its body (requestCost; counted as
// far as the heads' share leaves room beside the head): a place among the
// heads, then the bytes in the budget. When either is not free at once the
// request waits in line, if it finds a place among those waiting (cost, at
// most the waiting share); else it fails at once with errNoRoomToWait. It
// returns what it reserved for the head and for cost, their sum held in the
// heads' share (releaseHead) and in the budget (Release).
func (b *Budget) acquireHead(ctx context.Context, n, cost int64) (head, extra int64, err error) {
	n = max(0, min(n, headBytes, b.headsSize))
	extra = max(0, min(cost, b.headsSize-n))
	place := n + extra
	gotPlace := b.heads.TryAcquire(place)
	if gotPlace && b.sem.TryAcquire(place) {
		b.headsUsed.Add(place)
		b.used.Add(place)
		return n, extra, nil
	}
	// Waiting: the request holds its headers unread meanwhile.
	waitPlace := max(0, min(cost, b.waitSize))
	if !b.waiting.TryAcquire(waitPlace) {
		if gotPlace {
			b.heads.Release(place)
		}
		return 0, 0, errNoRoomToWait
	}
	defer b.waiting.Release(waitPlace)
	if !gotPlace {
		if err := b.heads.Acquire(ctx, place); err != nil {
			return 0, 0, err
		}
	}
	b.headsUsed.Add(place)
	if _, _, err := b.acquire(ctx, place); err != nil {
		b.releaseHead(place)
		return 0, 0, err
	}
	return n, extra, nil
}

// releaseHead gives back a place among the heads (the bytes stay reserved
// in the budget until release).
func (b *Budget) releaseHead(n int64) {
	if n <= 0 {
		return
	}
	b.headsUsed.Add(-n)
	b.heads.Release(n)
}

// tryGrow reserves step more bytes for a growing body, with place more of
// the grow share (the step, plus its head's room on the first step): both or
// neither, and only if they are free now (never ahead of a waiter). The
// bytes are given back with release, the place with releaseGrow.
func (b *Budget) tryGrow(place, step int64) bool {
	if !b.grow.TryAcquire(place) {
		return false
	}
	if !b.sem.TryAcquire(step) {
		b.grow.Release(place)
		return false
	}
	b.growUsed.Add(place)
	b.used.Add(step)
	return true
}

// releaseGrow gives back a growing body's place in the grow share (the bytes
// stay reserved in the budget until release).
func (b *Budget) releaseGrow(n int64) {
	if n <= 0 {
		return
	}
	b.growUsed.Add(-n)
	b.grow.Release(n)
}

// InUse is the bytes reserved now.
func (b *Budget) InUse() int64 { return b.used.Load() }

// Size is the most bytes held at once.
func (b *Budget) Size() int64 { return b.size }
