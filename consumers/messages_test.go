package consumers_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/consumers"
	"github.com/inlet-dev/inlet/consumers/bus"
	"github.com/inlet-dev/inlet/consumers/internal/consumertest"
	"github.com/inlet-dev/inlet/internal/testwait"
)

// A message of several references (the streamer's default) runs each of
// them, one slot at a time, and skips a reference for another handler. A
// graceful Stop while the message is half handed out still runs the rest:
// the message was acknowledged, so nothing else would before the leases
// expired.
func TestStopFinishesTheMessageItIsIn(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rec := &recorder{}
	gate := make(chan struct{})
	started := make(chan struct{}, 10)
	svc, jobs, refs := threeJobsOneAtATime(t, b, rec.wrap(func(ctx context.Context, _ *consumers.Event) error {
		started <- struct{}{}
		select {
		case <-gate:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}))
	misrouted := refs[0]
	misrouted.Handler, misrouted.JobID = "other", misrouted.JobID+1000
	if err := b.PublishBatch(append(refs[:1:1], append([]bus.Ref{misrouted}, refs[1:]...)...)); err != nil {
		t.Fatal(err)
	}
	<-started // the first runs; the other two wait for its slot
	stopped := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		stopped <- svc.Stop(ctx)
	}()
	close(gate)
	if err := <-stopped; err != nil {
		t.Fatalf("stop: %v", err)
	}
	for _, id := range jobs {
		if j := b.Job(t, id); j.Status != "completed" {
			t.Errorf("job %d is %s after Stop, want completed", id, j.Status)
		}
	}
	if n := len(rec.Calls()); n != 3 {
		t.Errorf("handler ran %d times, want 3", n)
	}
	if n := strings.Count(b.logs.String(), "dropped job reference for another handler"); n != 1 {
		t.Errorf("the misrouted reference was logged %d times, want once", n)
	}
}

// Past Stop's deadline the attempt cut short and the references of its
// message not yet started all give their leases back: pending again, no
// attempt counted, and the handler ran once. (The references not started
// were left to lease expiry before, which the reaper counted as attempts
// whenever another consumer of the handler was alive.)
func TestStopDeadlineLeavesTheRestOfTheMessage(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rec := &recorder{}
	started := make(chan struct{}, 10)
	svc, jobs, refs := threeJobsOneAtATime(t, b, rec.wrap(func(ctx context.Context, _ *consumers.Event) error {
		started <- struct{}{}
		<-ctx.Done()
		return ctx.Err()
	}))
	if err := b.PublishBatch(refs); err != nil {
		t.Fatal(err)
	}
	<-started
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := svc.Stop(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Stop past its deadline: %v", err)
	}
	b.waitLogged(t, "consumers stopped before these job references started", 1)
	testwait.Eventually(t, wait, "every lease given back, the handler run once", func() (bool, string) {
		leased, givenBack := 0, 0
		for _, id := range jobs {
			switch j := b.Job(t, id); {
			case j.Status == "leased":
				leased++
			case j.Status == "pending" && j.AttemptCount == 0:
				givenBack++
			}
		}
		n := len(rec.Calls())
		return leased == 0 && givenBack == 3 && n == 1, fmt.Sprintf("%d of 3 leased, %d given back, handler ran %d times", leased, givenBack, n)
	})
	for _, id := range jobs {
		if as := b.Attempts(t, id); len(as) != 0 {
			t.Fatalf("job %d has attempt rows %+v, want none", id, as)
		}
	}
}

// threeJobsOneAtATime starts a service whose handler "h" (f) runs one job
// at a time, stores three events for it and claims their jobs (unpublished).
// The test stops the service itself; its cleanup's Stop is then a no-op.
func threeJobsOneAtATime(t *testing.T, b *testBundle, f consumers.HandlerFunc) (*consumers.Service, []int64, []bus.Ref) {
	t.Helper()
	svc := b.start(t, b.config(consumers.Handler{Name: "h", Concurrency: 1, Func: f}))
	var jobs []int64
	for range 3 {
		jobs = append(jobs, b.JobID(t, b.InsertEvent(t, consumertest.EventParams{}), "h"))
	}
	refs := b.ClaimOnce(t, time.Minute)
	if len(refs) != 3 {
		t.Fatalf("claimed %d jobs, want 3", len(refs))
	}
	return svc, jobs, refs
}
