//go:build knownlimits

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

// Known limit (kept failing on purpose, under the knownlimits tag; found by
// review helper-103),
// the same loss one step further back: references the transport has already
// handed to this process (natsbus: pulled into the client, up to
// PullMaxMessages(64) messages of up to 32 references, consumers/bus/natsbus/
// nats.go:364, and the one message deliver blocks on while sending to the
// reader, nats.go:321) but that the reader has not taken, because it is
// still handing out an earlier message's references (waitForSlot,
// consumers/service.go:363), have nobody extending their leases. The earlier
// message's waiting references are extended (helper-85's fix); these are
// not, so under the same slow handler the reaper counts an attempt for each
// of them (the consumer is alive) and dead-letters it on its last attempt,
// without the handler ever being called. The helper-85 test
// (tests/queuedlease_test.go) passes only because its 32 jobs fit in ONE
// message; a 33rd job fails the same way.
//
// Here: concurrency 1, lease 1.5 s; message 1 = [A, B] with A running ~3 s
// (B waits in waitForSlot and is extended), message 2 = [C] is delivered to
// this process and waits behind B. After the leases' expiry the reaper runs.
//
// Expected: C, held by this live consumer, keeps its lease like B and
// completes after A and B. Actual: B is still leased (extended) but C is
// dead_letter (lease_expired), its handler never called.
//
// Suggested fix: extend the leases of every reference the process holds but
// has not started, not only the rest of the message at hand: e.g. the reader
// keeps taking messages while it waits for slots (acking none until a
// reference starts) and extends all their references in waitForSlot's one
// round trip; or pull at most one message ahead (PullMaxMessages(1)) and
// bound what the streamer leases per handler by what its consumers can start
// within a lease.
func TestKnownLimitReferencesBehindAWaitingMessageKeepTheirLeases(t *testing.T) {
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
	refs := b.ClaimOnce(t, 1500*time.Millisecond)
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
	publish(byID[ids[0]], byID[ids[1]]) // [A, B]: B waits for A's slot at index 1
	select {
	case id := <-started:
		if id != ids[0] {
			t.Fatalf("job %d started first, want %d", id, ids[0])
		}
	case <-time.After(wait):
		t.Fatal("the first message's attempt never started")
	}
	publish(byID[ids[2]]) // [C]: delivered to this process, behind B

	time.Sleep(time.Until(byID[ids[2]].LeaseExpiresAt) + 700*time.Millisecond)
	ctx := context.Background()
	if err := consumertest.AsRole(ctx, b.Admin, "webhook_streamer", func(tx pgx.Tx) error {
		_, err := queries.New(tx).ReapExpiredLeases(ctx, 100)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	bAfter, cAfter := b.Job(t, ids[1]), b.Job(t, ids[2])
	close(release)
	b.WaitJobStatus(t, ids[0], "completed", wait)
	if bAfter.Status != "leased" {
		t.Fatalf("control: B (index 1 of message 1, waiting in waitForSlot) was reaped too: %+v", bAfter)
	}
	b.WaitJobStatus(t, ids[1], "completed", wait)
	if cAfter.Status != "leased" {
		time.Sleep(500 * time.Millisecond)
		mu.Lock()
		n := calls[ids[2]]
		mu.Unlock()
		t.Fatalf("job %d (message 2, delivered to this live consumer behind message 1's waiting reference): "+
			"the reaper made it %s (class %s, attempts %d) while B, waiting beside it, kept its extended lease; "+
			"its handler was called %d times. Want: its lease kept while this process holds it, then completed",
			ids[2], cAfter.Status, deref(cAfter.LastErrorClass), cAfter.AttemptCount, n)
	}
	b.WaitJobStatus(t, ids[2], "completed", wait)
}
