package consumers_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/consumers"
	"github.com/inlet-dev/inlet/consumers/bus"
	"github.com/inlet-dev/inlet/consumers/bus/natsbus"
	"github.com/inlet-dev/inlet/consumers/internal/consumertest"
	"github.com/inlet-dev/inlet/internal/natstest"
	"github.com/inlet-dev/inlet/schema/queries"
)

// Regression test for a defect found by review helper-103 (fixed: the first
// reference of a message waits in waitForSlot too; the text below describes
// the behaviour before the fix).
//
// A message whose FIRST reference waits for a concurrency slot is held by
// the handler's reader (consumers/service.go:356-361: select on r.slots or
// ctx) without any lease extension, while a reference at index >= 1 of a
// message waits in waitForSlot, which extends the leases (fix of review
// helper-85). The reader holds the whole message there, unacknowledged, for
// as long as the running attempts take; when that is longer than the lease,
// the streamer's reaper finds those leases expired and, the consumer being
// alive (it says so every AliveInterval), counts an attempt for each
// reference that never ran: the job goes back to pending, or to dead_letter
// (lease_expired) on its last attempt, although its handler was never called
// and the consumer was healthy. NATS redelivery (AckWait) does not help: the
// single busy replica gets the copy itself, and no redelivery touches the
// lease.
//
// Here, over real NATS and PostgreSQL: concurrency 1, lease 1.5 s (ratio of
// the defaults: AckWait half the lease), message 1 = [A] whose handler runs
// ~3 s, message 2 = [C, D] reaches the reader right after A's message is
// acknowledged and waits for A's slot at index 0. After the leases' expiry
// the reaper runs once.
//
// Expected: C and D are still leased to this consumer (their leases were
// extended while this process held them, as for any waiting reference), and
// complete once A's slot frees. Actual: the reaper dead-letters C and D
// (lease_expired) and the handler is never called for them.
//
// Suggested fix: make the first reference's wait the same as the others':
// wait for it with waitForSlot(r, mine, &extended) (also watching ctx for
// the nack when Stop begins), so every reference of a message held by the
// reader has its lease extended; more generally, extend (or NATS InProgress)
// every reference the process holds but has not started.
func TestFirstReferenceWaitKeepsTheLeases(t *testing.T) {
	t.Parallel()
	w := newSlotWait(t)
	w.publish(t, w.ids[0])
	w.firstStarted(t)
	w.publish(t, w.ids[1], w.ids[2]) // [C, D]: its first reference waits for A's slot

	reaped := w.reapPastLease(t, w.ids[1])
	afterReap := map[int64]consumertest.Job{}
	for _, id := range w.ids[1:] {
		afterReap[id] = w.b.Job(t, id)
	}
	close(w.release)
	w.b.WaitJobStatus(t, w.ids[0], "completed", wait)

	for _, id := range w.ids[1:] {
		j := afterReap[id]
		if j.Status != "leased" {
			t.Errorf("job %d (a reference held by the consumer's reader, waiting for the slot at index 0 of its message): "+
				"after its lease ran out the reaper found it expired and made it %s (class %s, attempts %d) "+
				"although the consumer was alive and holding it; its handler was called %d times. "+
				"Want: its lease extended while it waits, as for references at index >= 1 (reaped: %+v)",
				id, j.Status, deref(j.LastErrorClass), j.AttemptCount, w.callsOf(id), reaped)
			continue
		}
		w.b.WaitJobStatus(t, id, "completed", wait)
	}
}

// slotWait is the scenario of the tests of references waiting for a slot:
// a consumer of handler h with one slot, over real NATS (ack wait 750 ms,
// half the lease as the defaults are), whose handler holds the first of
// three jobs until release; the three are claimed under a 1.5 s lease and
// published as each test groups them.
type slotWait struct {
	b           *testBundle
	streamerBus *natsbus.NATS
	ids         []int64
	byID        map[int64]bus.Ref
	started     chan int64
	release     chan struct{}
	mu          sync.Mutex
	calls       map[int64]int
}

func newSlotWait(t *testing.T) *slotWait {
	t.Helper()
	w := &slotWait{b: setup(t), started: make(chan int64, 16), release: make(chan struct{}), calls: map[int64]int{}}
	srv := natstest.Start(t)
	newBus := func(name string) *natsbus.NATS {
		n, err := natsbus.New(context.Background(), natsbus.Config{URL: srv.URL(), Name: name,
			AckWait: 750 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { n.Close() })
		return n
	}
	consumerBus := newBus("consumer")
	w.streamerBus = newBus("streamer")
	var slowJob int64
	cfg := w.b.config(consumers.Handler{Name: "h", Concurrency: 1, MaxAttempts: 1,
		Func: func(ctx context.Context, e *consumers.Event) error {
			w.mu.Lock()
			w.calls[e.JobID]++
			slow := e.JobID == slowJob
			w.mu.Unlock()
			w.started <- e.JobID
			if slow {
				select {
				case <-w.release:
				case <-time.After(wait):
				}
			}
			return nil
		}})
	cfg.Subscriber = consumerBus
	cfg.LeaseExtend = time.Second
	cfg.AliveInterval = 100 * time.Millisecond
	w.b.start(t, cfg)

	for range 3 {
		w.ids = append(w.ids, w.b.JobID(t, w.b.InsertEvent(t, consumertest.EventParams{}), "h"))
	}
	w.mu.Lock()
	slowJob = w.ids[0]
	w.mu.Unlock()
	w.byID = map[int64]bus.Ref{}
	for _, r := range w.b.ClaimOnce(t, 1500*time.Millisecond) {
		w.byID[r.JobID] = r
	}
	if len(w.byID) != 3 {
		t.Fatalf("claimed %+v", w.byID)
	}
	return w
}

// publish sends the references of jobs ids in one message.
func (w *slotWait) publish(t *testing.T, ids ...int64) {
	t.Helper()
	var rs []bus.Ref
	for _, id := range ids {
		rs = append(rs, w.byID[id])
	}
	msg, err := bus.NewBatchMessage(rs)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.streamerBus.Publish(bus.Topic("h"), msg); err != nil {
		t.Fatal(err)
	}
}

// firstStarted waits for the slow first job's attempt to start.
func (w *slotWait) firstStarted(t *testing.T) {
	t.Helper()
	select {
	case id := <-w.started:
		if id != w.ids[0] {
			t.Fatalf("job %d started first, want %d", id, w.ids[0])
		}
	case <-time.After(wait):
		t.Fatal("the first message's attempt never started")
	}
}

// reapPastLease waits until job id's claimed lease has run out (unless
// extended) and runs the streamer's reaper once.
func (w *slotWait) reapPastLease(t *testing.T, id int64) []queries.ReapExpiredLeasesRow {
	t.Helper()
	time.Sleep(time.Until(w.byID[id].LeaseExpiresAt) + 700*time.Millisecond)
	ctx := context.Background()
	var reaped []queries.ReapExpiredLeasesRow
	if err := consumertest.AsRole(ctx, w.b.Admin, "webhook_streamer", func(tx pgx.Tx) error {
		var err error
		reaped, err = queries.New(tx).ReapExpiredLeases(ctx, 100)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return reaped
}

// callsOf is how often the handler ran for job id, after a moment for a
// (wrong) run to show.
func (w *slotWait) callsOf(id int64) int {
	time.Sleep(500 * time.Millisecond)
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.calls[id]
}
