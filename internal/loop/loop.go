// Package loop runs a service's background loops (claim, poll, reap,
// report, seal, watch) and stops them in reverse start order, each one
// finished before the one started before it is told to stop: what depends
// on another loop is started after it and so stops first, the way deferred
// calls unwind.
package loop

import (
	"context"
	"sync"
)

// Group is a set of running loops. The zero Group is ready to use; it may
// be used again after Stop.
type Group struct {
	mu    sync.Mutex
	loops []running
}

type running struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// Go runs f in a goroutine of its own with a context that ends when ctx
// does or when Stop reaches it. f must return once its context is done.
func (g *Group) Go(ctx context.Context, f func(context.Context)) {
	ctx, cancel := context.WithCancel(ctx)
	r := running{cancel: cancel, done: make(chan struct{})}
	g.mu.Lock()
	g.loops = append(g.loops, r)
	g.mu.Unlock()
	go func() {
		defer close(r.done)
		f(ctx)
	}()
}

// Stop stops the loops, last started first: it cancels one loop's context
// and waits for it to return before going on to the previous one. It
// returns when all have returned. Stop on a Group with no loops returns at
// once.
func (g *Group) Stop() {
	g.mu.Lock()
	loops := g.loops
	g.loops = nil
	g.mu.Unlock()
	for i := len(loops) - 1; i >= 0; i-- {
		loops[i].cancel()
		<-loops[i].done
	}
}
