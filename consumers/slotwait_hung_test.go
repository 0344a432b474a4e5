package consumers_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/consumers"
	"github.com/inlet-dev/inlet/consumers/bus"
	"github.com/inlet-dev/inlet/consumers/internal/consumertest"
	"github.com/inlet-dev/inlet/internal/testwait"
)

// giveBackHungLog is what the service logs when it gives back references
// waiting behind slots held by handlers that ignore their context.
const giveBackHungLog = "job references waited for a slot past the bound"

// slotWaitBench is a consumer of handler "h" with one slot, LeaseExtend
// 300 ms and Timeout 1 s (a waiting reference may be given back after
// 1.3 s), whose jobs are claimed under lease and published as each test
// groups them; calls counts the handler's calls per job.
type slotWaitBench struct {
	b     *testBundle
	ids   []int64
	byID  map[int64]bus.Ref
	mu    sync.Mutex
	calls map[int64]int
}

func newSlotWaitBench(t *testing.T, jobs int, f func(ctx context.Context, first bool) error) *slotWaitBench {
	t.Helper()
	w := &slotWaitBench{b: setup(t), byID: map[int64]bus.Ref{}, calls: map[int64]int{}}
	cfg := w.b.config(consumers.Handler{Name: "h", Concurrency: 1, MaxAttempts: 3, Timeout: time.Second, Backoff: noBackoff,
		Func: func(ctx context.Context, e *consumers.Event) error {
			w.mu.Lock()
			w.calls[e.JobID]++
			first := e.JobID == w.ids[0]
			w.mu.Unlock()
			return f(ctx, first)
		}})
	cfg.LeaseExtend = 300 * time.Millisecond
	cfg.AliveInterval = 100 * time.Millisecond
	w.b.start(t, cfg)
	w.mu.Lock()
	for range jobs {
		w.ids = append(w.ids, w.b.JobID(t, w.b.InsertEvent(t, consumertest.EventParams{}), "h"))
	}
	w.mu.Unlock()
	for _, r := range w.b.ClaimOnce(t, 2*time.Second) {
		w.byID[r.JobID] = r
	}
	if len(w.byID) != jobs {
		t.Fatalf("claimed %d of %d jobs: %+v", len(w.byID), jobs, w.byID)
	}
	return w
}

func (w *slotWaitBench) publish(t *testing.T, ids ...int64) {
	t.Helper()
	var rs []bus.Ref
	for _, id := range ids {
		rs = append(rs, w.byID[id])
	}
	if err := w.b.PublishBatch(rs); err != nil {
		t.Fatal(err)
	}
}

func (w *slotWaitBench) callsOf(id int64) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.calls[id]
}

// References waiting for a slot held by a handler that ignores its context
// are given back, uncounted, once they have waited the handler's Timeout and
// a LeaseExtend, instead of keeping their jobs leased for as long as the
// handler hangs (review helper-283: the handler's circuit probe, leased only
// while none of its jobs is, never came, and no replica got its jobs).
func TestReferencesWaitingBehindHungSlotsAreGivenBack(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	w := newSlotWaitBench(t, 3, func(_ context.Context, first bool) error {
		if first {
			started <- struct{}{}
			<-release // hangs, ignoring its context
		}
		return nil
	})
	t.Cleanup(func() { close(release) }) // before Stop: the hung call returns
	w.publish(t, w.ids[0])
	select {
	case <-started:
	case <-time.After(wait):
		t.Fatal("the hanging attempt never started")
	}
	published := time.Now()
	w.publish(t, w.ids[1], w.ids[2]) // both wait for the hung slot

	// Before the bound (the Timeout and a LeaseExtend, 1.3 s) they wait,
	// their leases extended.
	time.Sleep(900 * time.Millisecond)
	for _, id := range w.ids[1:] {
		if j := w.b.Job(t, id); j.Status != "leased" {
			t.Fatalf("job %d %s %s after its reference began waiting (attempt_count %d); want still leased before the wait's bound",
				id, j.Status, time.Since(published), j.AttemptCount)
		}
	}

	for _, id := range w.ids[1:] {
		testwait.Eventually(t, wait, fmt.Sprintf("job %d given back", id), func() (bool, string) {
			j := w.b.Job(t, id)
			return j.Status == "pending", fmt.Sprintf("%s, attempt_count %d, %s after it was published", j.Status, j.AttemptCount, time.Since(published))
		})
		j := w.b.Job(t, id)
		if j.AttemptCount != 0 || j.LastErrorClass != nil || len(w.b.Attempts(t, id)) != 0 || w.callsOf(id) != 0 {
			t.Errorf("job %d given back: attempt_count %d, class %s, history %v, handler called %d times; want the attempt not counted and the handler not called",
				id, j.AttemptCount, deref(j.LastErrorClass), w.b.Outcomes(t, id), w.callsOf(id))
		}
	}
	if took := time.Since(published); took < 1300*time.Millisecond {
		t.Errorf("given back %s after they began waiting; want no sooner than the handler's Timeout and a LeaseExtend (1.3 s)", took)
	}
	w.b.waitLogged(t, giveBackHungLog, 1)
	if j := w.b.Job(t, w.ids[0]); j.Status != "leased" {
		t.Errorf("the hung attempt's job is %s; want it left leased, for its lease to run out and the reaper to count it", j.Status)
	}
}

// A handler that takes its whole Timeout on every job, and returns, keeps
// its backlog: references that wait for its slot far longer than the bound
// of a hung slot (the Timeout and a LeaseExtend) are not given back, each
// job runs once and completes on its first attempt.
func TestSlowHandlersBacklogIsNotGivenBack(t *testing.T) {
	t.Parallel()
	const jobs = 6
	w := newSlotWaitBench(t, jobs, func(ctx context.Context, _ bool) error {
		<-ctx.Done() // the whole Timeout, then it returns
		return nil
	})
	// Two messages, on the handler's topic and on its role topic, whose
	// readers take turns at the one slot: each reference then waits about
	// two Timeouts (2 s) for it, past the bound (1.3 s).
	w.publish(t, w.ids[:jobs/2]...)
	var rs []bus.Ref
	for _, id := range w.ids[jobs/2:] {
		rs = append(rs, w.byID[id])
	}
	msg, err := bus.NewBatchMessage(rs)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.b.Bus.Publish(bus.RoleTopic("h", ""), msg); err != nil {
		t.Fatal(err)
	}
	for _, id := range w.ids {
		j := w.b.WaitJobStatus(t, id, "completed", wait)
		if j.AttemptCount != 1 || w.callsOf(id) != 1 {
			t.Errorf("job %d completed on attempt %d after %d handler calls (history %v); want once, on attempt 1",
				id, j.AttemptCount, w.callsOf(id), w.b.Outcomes(t, id))
		}
	}
	if strings.Contains(w.b.logs.String(), giveBackHungLog) {
		t.Errorf("the service gave back references of a handler that finishes in its Timeout; want them to wait for its slot")
	}
}
