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
	b := setup(t)
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
	consumerBus, streamerBus := newBus("consumer"), newBus("streamer")

	release := make(chan struct{})
	started := make(chan int64, 16)
	var mu sync.Mutex
	calls := map[int64]int{}
	var slowJob int64
	cfg := b.config(consumers.Handler{Name: "h", Concurrency: 1, MaxAttempts: 1,
		Func: func(ctx context.Context, e *consumers.Event) error {
			mu.Lock()
			calls[e.JobID]++
			slow := e.JobID == slowJob
			mu.Unlock()
			started <- e.JobID
			if slow {
				select {
				case <-release:
				case <-time.After(wait):
				}
			}
			return nil
		}})
	cfg.Subscriber = consumerBus
	cfg.LeaseExtend = time.Second
	cfg.AliveInterval = 100 * time.Millisecond
	b.start(t, cfg)

	var ids []int64
	for range 3 {
		ids = append(ids, b.JobID(t, b.InsertEvent(t, consumertest.EventParams{}), "h"))
	}
	mu.Lock()
	slowJob = ids[0]
	mu.Unlock()
	const lease = 1500 * time.Millisecond
	refs := b.ClaimOnce(t, lease)
	byID := map[int64]bus.Ref{}
	for _, r := range refs {
		byID[r.JobID] = r
	}
	if len(byID) != 3 {
		t.Fatalf("claimed %+v", refs)
	}
	publish := func(rs ...bus.Ref) {
		msg, err := bus.NewBatchMessage(rs)
		if err != nil {
			t.Fatal(err)
		}
		if err := streamerBus.Publish(bus.Topic("h"), msg); err != nil {
			t.Fatal(err)
		}
	}
	publish(byID[ids[0]])
	select {
	case id := <-started:
		if id != ids[0] {
			t.Fatalf("job %d started first, want %d", id, ids[0])
		}
	case <-time.After(wait):
		t.Fatal("the first message's attempt never started")
	}
	publish(byID[ids[1]], byID[ids[2]]) // [C, D]: its first reference waits for A's slot

	// Past the claim's lease (the waiting references' leases, unless extended).
	time.Sleep(time.Until(byID[ids[1]].LeaseExpiresAt) + 700*time.Millisecond)
	ctx := context.Background()
	var reaped []queries.ReapExpiredLeasesRow
	if err := consumertest.AsRole(ctx, b.Admin, "webhook_streamer", func(tx pgx.Tx) error {
		var err error
		reaped, err = queries.New(tx).ReapExpiredLeases(ctx, 100)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	afterReap := map[int64]consumertest.Job{}
	for _, id := range ids[1:] {
		afterReap[id] = b.Job(t, id)
	}
	close(release)
	b.WaitJobStatus(t, ids[0], "completed", wait)

	for _, id := range ids[1:] {
		j := afterReap[id]
		if j.Status != "leased" {
			time.Sleep(500 * time.Millisecond) // room for a (wrong) run to show in calls
			mu.Lock()
			n := calls[id]
			mu.Unlock()
			t.Errorf("job %d (a reference held by the consumer's reader, waiting for the slot at index 0 of its message): "+
				"after its lease ran out the reaper found it expired and made it %s (class %s, attempts %d) "+
				"although the consumer was alive and holding it; its handler was called %d times. "+
				"Want: its lease extended while it waits, as for references at index >= 1 (reaped: %+v)",
				id, j.Status, deref(j.LastErrorClass), j.AttemptCount, n, reaped)
			continue
		}
		b.WaitJobStatus(t, id, "completed", wait)
	}
}
