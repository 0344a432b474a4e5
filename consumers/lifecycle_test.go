package consumers_test

import (
	"context"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/consumers"
	"github.com/inlet-dev/inlet/consumers/internal/consumertest"
)

// A handler that ignores its context does not hold its job past its
// Timeout: the lease runs out and the reaper ends the attempt.
//
// Regression test (review helper-130; fixed: the text describes the
// behaviour before the fix). Handler.Timeout is documented as "Timeout
// bounds one attempt; the handler's context ends then", and the design
// promises "every job ends completed or dead-lettered". A handler that does
// not watch its context (a blocking call in a library without a context, a
// deadlock) is not bounded at all: run() waits for it forever and
// extendLease (attempt.go, extendLease goroutine started in attempt(); it
// runs on the attempt's ctx, not on the handler's timeout context) keeps
// pushing the lease out every LeaseExtend/3, for as long as the process
// lives. The job stays "leased" forever: never retried on another replica,
// never dead-lettered, its concurrency slot held, and nothing recorded.
//
// Here: Timeout 200ms, MaxAttempts 1, the handler blocks (ignoring ctx)
// until the test ends. Expected: shortly after the timeout (plus a lease)
// the attempt is over: failed with class timeout (or its lease left to
// expire, lease_expired), so with MaxAttempts 1 the job is dead_letter.
// Before: still leased, its lease extended, after 10 s.
func TestHandlerIgnoringItsContextIsBoundedByTimeout(t *testing.T) {
	t.Parallel()
	b := setup(t)
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	cfg := b.config(consumers.Handler{Name: "stuck", MaxAttempts: 1, Timeout: 200 * time.Millisecond,
		Func: func(context.Context, *consumers.Event) error {
			select {
			case started <- struct{}{}:
			default:
			}
			<-release // a call that does not take a context
			return nil
		}})
	cfg.LeaseExtend = 600 * time.Millisecond
	b.start(t, cfg)
	// Runs before the service's Stop (cleanups run last first).
	t.Cleanup(func() { close(release) })
	b.StartStreamer(t, consumertest.StreamerOptions{Lease: time.Second})

	jobID := b.JobID(t, b.InsertEvent(t, consumertest.EventParams{}), "stuck")
	select {
	case <-started:
	case <-time.After(wait):
		t.Fatal("handler never called")
	}
	// 200ms timeout, 1s lease: 10s is 50 timeouts and 10 leases.
	deadline := time.Now().Add(10 * time.Second)
	var j consumertest.Job
	for time.Now().Before(deadline) {
		j = b.Job(t, jobID)
		if j.Status != "leased" {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if j.Status == "leased" {
		t.Fatalf("job %d is still %s 10s after its handler's 200ms Timeout (lease extended to %v, attempts %d): "+
			"a handler that ignores its context holds its job forever; want the attempt bounded by Timeout "+
			"(failed as timeout, or its lease left to expire) and, with MaxAttempts 1, the job dead_letter",
			jobID, j.Status, j.LeaseExpiresAt, j.AttemptCount)
	}
}

// A Stop while another is draining waits for it.
//
// Regression test (review helper-130; fixed: the text describes the
// behaviour before the fix). Stop's contract is "Stop stops taking
// messages and waits for the attempts in flight to finish and record their
// outcomes"; a second Stop while the first is still draining (a signal
// handler's Stop and main's deferred Stop, an errgroup cancelling both) does
// not wait: service.go Stop sets state = stateStopped before draining and
// any later call sees state != stateStarted and returns nil at once. The
// caller then believes the service is stopped and closes the pool while an
// attempt is still running: its outcome cannot be recorded, the lease
// expires and the reaper counts an attempt (dead-lettering a job on its
// last attempt) although the handler succeeded.
//
// Expected: every Stop returns only once the service has stopped (the
// attempts in flight finished and recorded), or with its ctx's error.
// Before: one of two concurrent Stops returned nil while the handler is
// still running and the job is still leased.
func TestSecondStopWaitsForTheFirst(t *testing.T) {
	t.Parallel()
	b := setup(t)
	release := make(chan struct{})
	letGo := sync.OnceFunc(func() { close(release) })
	t.Cleanup(letGo)
	running := make(chan struct{}, 1)
	svc, err := consumers.New(b.config(consumers.Handler{Name: "h", Func: func(context.Context, *consumers.Event) error {
		running <- struct{}{}
		<-release
		return nil
	}}))
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	b.StartStreamer(t, consumertest.StreamerOptions{})
	jobID := b.JobID(t, b.InsertEvent(t, consumertest.EventParams{}), "h")
	select {
	case <-running:
	case <-time.After(wait):
		t.Fatal("handler never called")
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	returned := make(chan error, 2)
	for range 2 {
		go func() { returned <- svc.Stop(ctx) }()
	}
	// The handler is blocked for 2 s: no Stop may return in that time.
	var early error
	returnedEarly := false
	select {
	case early = <-returned:
		returnedEarly = true
	case <-time.After(2 * time.Second):
	}
	j := b.Job(t, jobID)
	letGo()
	for range 2 - btoi(returnedEarly) {
		if err := <-returned; err != nil {
			t.Errorf("Stop: %v", err)
		}
	}
	if returnedEarly {
		t.Fatalf("Stop returned %v while the attempt in flight was still running (its handler blocked, job %d %s): "+
			"want every Stop to wait for the attempts in flight to finish and record their outcomes", early, jobID, j.Status)
	}
	b.WaitJobStatus(t, jobID, "completed", wait)
}

func btoi(v bool) int {
	if v {
		return 1
	}
	return 0
}

// New refuses CompleteBatch and TakeBatch past their bound.
//
// Regression test (review helper-130; fixed: the text describes the
// behaviour before the fix). Config.CompleteBatch and Config.TakeBatch
// have no upper bound in validate (config.go validate), so New accepts a
// value a Go programmer uses to mean "as large as it gets"
// (math.MaxInt), and Start then panics with "makechan: size out of range"
// in groupcommit.New (internal/groupcommit/groupcommit.go:87, make(chan,
// MaxBatch*Committers); for TakeBatch the product even overflows to a
// negative size), called from service.go Start (newCompletions /
// newTakes) after the subscriptions were registered, the topics
// subscribed and the liveness loop started: the program crashes, or, if it
// recovers, it leaks a running liveness loop and open subscriptions of a
// service that never started. Every other out-of-range setting is a
// "consumers config: <field>: ..." error from New.
//
// Expected: New returns an error naming complete_batch / take_batch (or
// the value is capped) and Start never panics. Suggested fix: bound both in
// Config.validate (e.g. at most 100_000), as the limits are.
func TestHugeBatchSizesAreRejectedByNew(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		set  func(*consumers.Config)
	}{
		{"complete_batch", func(c *consumers.Config) { c.CompleteBatch = math.MaxInt }},
		{"take_batch", func(c *consumers.Config) { c.TakeBatch = math.MaxInt }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := setup(t)
			cfg := b.config(consumers.Handler{Name: "h", Func: ok})
			tc.set(&cfg)
			svc, err := consumers.New(cfg)
			if err != nil {
				return // rejected with an error: fine
			}
			var panicked any
			func() {
				defer func() { panicked = recover() }()
				err = svc.Start(context.Background())
			}()
			if panicked != nil {
				t.Fatalf("New accepted %s = math.MaxInt and Start panicked: %v; want New to return an error naming %s",
					tc.name, panicked, tc.name)
			}
			if err == nil {
				stop, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				_ = svc.Stop(stop)
			}
		})
	}
}
