// Package groupcommit lets concurrent callers share one database round trip:
// a Group's committers each take the requests waiting (up to a count and a
// byte size, waiting briefly for company once a batch has some), hand them to
// one commit function, and answer every caller with its own result.
//
// A lone request never waits: it is committed at once, so group commit costs
// an idle system nothing and a busy one fewer commits.
package groupcommit

import (
	"context"
	"errors"
	"sync"
	"time"
)

// Config tunes a Group.
type Config struct {
	// MaxBatch is the most requests one commit takes. Defaults to 128.
	MaxBatch int
	// MaxBytes closes a batch once the sizes of its requests reach it; a
	// single request larger than MaxBytes is committed alone. Zero: no byte
	// bound.
	MaxBytes int64
	// MaxWait is how long a batch that is not full waits for more requests
	// once it holds two (a lone request never waits). Defaults to 1ms; a
	// negative value never waits (a batch is whatever queued while the last
	// commit ran).
	MaxWait time.Duration
	// Committers is how many batches commit at once. Defaults to 4.
	Committers int
}

func (c Config) withDefaults() Config {
	if c.MaxBatch <= 0 {
		c.MaxBatch = 128
	}
	if c.MaxWait == 0 {
		c.MaxWait = time.Millisecond
	}
	if c.Committers <= 0 {
		c.Committers = 4
	}
	return c
}

// ErrClosed is returned by Do after Close, and to requests still queued when
// Close ran.
var ErrClosed = errors.New("group commit closed")

// Request is one caller's value in a batch. The commit function must answer
// every request of its batch exactly once.
type Request[T, R any] struct {
	// Ctx is the caller's context: a commit should skip (answer with
	// Ctx.Err()) requests whose caller already gave up.
	Ctx   context.Context
	Value T
	size  int64
	done  chan answer[R]
}

type answer[R any] struct {
	v   R
	err error
}

// Answer gives the caller its result.
func (r *Request[T, R]) Answer(v R, err error) { r.done <- answer[R]{v, err} }

// Group batches requests of type T answered with R.
type Group[T, R any] struct {
	cfg    Config
	size   func(T) int64
	commit func([]*Request[T, R])

	queue  chan *Request[T, R]
	stop   chan struct{}
	wg     sync.WaitGroup
	closed sync.Once
}

// New starts cfg.Committers committers that call commit with each batch. size
// weighs a request against MaxBytes; nil weighs nothing. Close stops them.
func New[T, R any](cfg Config, size func(T) int64, commit func([]*Request[T, R])) *Group[T, R] {
	cfg = cfg.withDefaults()
	g := &Group[T, R]{cfg: cfg, size: size, commit: commit,
		queue: make(chan *Request[T, R], cfg.MaxBatch*cfg.Committers), stop: make(chan struct{})}
	for range cfg.Committers {
		g.wg.Go(g.loop)
	}
	return g
}

// Do queues v and waits for its batch's answer. If ctx ends first, Do
// returns ctx.Err(); the batch may still commit v (the caller must treat it
// as unknown).
func (g *Group[T, R]) Do(ctx context.Context, v T) (R, error) {
	var zero R
	r := &Request[T, R]{Ctx: ctx, Value: v, done: make(chan answer[R], 1)}
	if g.size != nil {
		r.size = g.size(v)
	}
	select {
	case <-g.stop: // checked first: the queue may have room after Close
		return zero, ErrClosed
	default:
	}
	select {
	case g.queue <- r:
	case <-ctx.Done():
		return zero, ctx.Err()
	case <-g.stop:
		return zero, ErrClosed
	}
	select {
	case a := <-r.done:
		return a.v, a.err
	case <-g.stop:
		// Closed while queued or committing: wait for a batch in flight
		// (Close waits for it too), else it was never committed.
		g.wg.Wait()
		select {
		case a := <-r.done:
			return a.v, a.err
		default:
			return zero, ErrClosed
		}
	case <-ctx.Done():
		// The answer may have come at the same moment: select picks at
		// random, and a committed request must not be answered with its
		// caller's timeout (ingress would say "outcome unknown").
		select {
		case a := <-r.done:
			return a.v, a.err
		default:
		}
		return zero, ctx.Err()
	}
}

// Queued is how many requests wait in the queue for a committer (not
// those a committer has taken).
func (g *Group[T, R]) Queued() int { return len(g.queue) }

// Close stops the committers after the batches in flight; requests still
// queued are answered with ErrClosed.
func (g *Group[T, R]) Close() {
	g.closed.Do(func() {
		close(g.stop)
		g.wg.Wait()
		for {
			select {
			case r := <-g.queue:
				var zero R
				r.Answer(zero, ErrClosed)
			default:
				return
			}
		}
	})
}

func (g *Group[T, R]) loop() {
	batch := make([]*Request[T, R], 0, g.cfg.MaxBatch)
	var carry *Request[T, R] // took it, but it did not fit the last batch
	for {
		batch = batch[:0]
		if carry != nil {
			batch, carry = append(batch, carry), nil
		} else {
			select {
			case <-g.stop:
				return
			case r := <-g.queue:
				batch = append(batch, r)
			}
		}
		batch, carry = g.fill(batch)
		g.commit(batch)
	}
}

// fill adds what is queued to batch, waiting up to MaxWait for a full one. A
// request that would take the batch past MaxBytes is returned as the next
// batch's first.
func (g *Group[T, R]) fill(batch []*Request[T, R]) ([]*Request[T, R], *Request[T, R]) {
	bytes := batch[0].size
	var timeout <-chan time.Time
	if g.cfg.MaxWait > 0 {
		t := time.NewTimer(g.cfg.MaxWait)
		defer t.Stop()
		timeout = t.C
	}
	add := func(r *Request[T, R]) *Request[T, R] {
		if g.cfg.MaxBytes > 0 && bytes+r.size > g.cfg.MaxBytes {
			return r
		}
		bytes += r.size
		batch = append(batch, r)
		return nil
	}
	for len(batch) < g.cfg.MaxBatch && (g.cfg.MaxBytes <= 0 || bytes < g.cfg.MaxBytes) {
		select {
		case r := <-g.queue:
			if c := add(r); c != nil {
				return batch, c
			}
			continue
		default:
		}
		// Alone (nothing else was waiting): commit at once, so a lone request
		// pays no wait. Company: wait a little for more of it.
		if timeout == nil || len(batch) == 1 {
			return batch, nil
		}
		select {
		case r := <-g.queue:
			if c := add(r); c != nil {
				return batch, c
			}
		case <-timeout:
			return batch, nil
		case <-g.stop:
			return batch, nil
		}
	}
	return batch, nil
}
