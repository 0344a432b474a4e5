package loop_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/internal/loop"
)

// A loop still running when the one started after it is stopped sees that
// loop already returned: each waits for its context, then records itself.
func TestStopStopsInReverseStartOrderOneAtATime(t *testing.T) {
	t.Parallel()
	var g loop.Group
	var mu sync.Mutex
	var stopped []int
	// running[i] is closed once loop i has begun, so Stop finds them all up.
	running := make([]chan struct{}, 5)
	for i := range running {
		running[i] = make(chan struct{})
		g.Go(context.Background(), func(ctx context.Context) {
			close(running[i])
			<-ctx.Done()
			mu.Lock()
			stopped = append(stopped, i)
			mu.Unlock()
		})
	}
	for _, r := range running {
		<-r
	}
	g.Stop()
	if want := []int{4, 3, 2, 1, 0}; !slices.Equal(stopped, want) {
		t.Fatalf("loops stopped in order %v, want %v (last started first)", stopped, want)
	}
}

// Stop waits for a loop to return, not just for its context to end.
func TestStopWaitsForEachLoopToReturn(t *testing.T) {
	t.Parallel()
	var g loop.Group
	ctxEnded := make(chan struct{})
	release := make(chan struct{})
	returned := make(chan struct{})
	g.Go(context.Background(), func(ctx context.Context) {
		<-ctx.Done()
		close(ctxEnded)
		<-release // cleaning up after its context ended
		close(returned)
	})
	waitedFor := make(chan bool, 1)
	go func() {
		g.Stop()
		select {
		case <-returned:
			waitedFor <- true
		default:
			waitedFor <- false
		}
	}()
	<-ctxEnded
	close(release)
	select {
	case ok := <-waitedFor:
		if !ok {
			t.Fatal("Stop returned while its loop was still running")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Stop did not return within 10s of its loop finishing")
	}
}

// A loop also ends with the context it was started with, and Stop then
// still returns.
func TestLoopEndsWithItsParentContext(t *testing.T) {
	t.Parallel()
	var g loop.Group
	ctx, cancel := context.WithCancel(context.Background())
	ended := make(chan struct{})
	g.Go(ctx, func(ctx context.Context) { <-ctx.Done(); close(ended) })
	cancel()
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		t.Fatal("loop still running 10s after its parent context ended")
	}
	g.Stop()
	g.Stop() // again, and on an empty group: no-ops
	var empty loop.Group
	empty.Stop()
}
