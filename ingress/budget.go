package ingress

import (
	"context"
	"sync/atomic"

	"golang.org/x/sync/semaphore"
)

// budget bounds the body bytes ingress holds at once
// (ingress.max_inflight_bytes). The semaphore serves waiters in arrival
// order, so a large body is not passed over forever by a stream of small ones.
type budget struct {
	size int64
	sem  *semaphore.Weighted
	used atomic.Int64 // for the inflight_bytes gauge
}

func newBudget(size int64) *budget {
	return &budget{size: size, sem: semaphore.NewWeighted(size)}
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

// inUse is the bytes reserved now.
func (b *budget) inUse() int64 { return b.used.Load() }
