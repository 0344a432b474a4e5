package natsbus_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/tests"

	"github.com/inlet-dev/inlet/consumers/bus"
	"github.com/inlet-dev/inlet/consumers/bus/natsbus"
	"github.com/inlet-dev/inlet/internal/natstest"
	"github.com/inlet-dev/inlet/internal/testwait"
)

func TestMain(m *testing.M) {
	code := m.Run()
	natstest.Cleanup()
	os.Exit(code)
}

func newNATS(t *testing.T, url string) *natsbus.NATS {
	t.Helper()
	return newNATSStorage(t, url, "")
}

func newNATSStorage(t *testing.T, url, storage string) *natsbus.NATS {
	t.Helper()
	n, err := natsbus.New(context.Background(), natsbus.Config{URL: url, AckWait: 5 * time.Second, Storage: storage, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	return n
}

// Watermill's universal Pub/Sub tests against our JetStream wiring (one
// work-queue stream, a durable queue group per topic).
func TestUniversalPubSub(t *testing.T) {
	srv := natstest.Start(t)
	tests.TestPubSub(t, tests.Features{
		ConsumerGroups:                      false, // one durable per topic: replicas share, there are no named groups
		ExactlyOnceDelivery:                 false,
		GuaranteedOrder:                     false,
		GuaranteedOrderWithSingleSubscriber: false,
		Persistent:                          true,
		NewSubscriberReceivesOldMessages:    false,
		GenerateTopicFunc: func(tctx tests.TestContext) string {
			return bus.TopicPrefix + "t_" + strings.ReplaceAll(watermill.NewShortUUID(), "-", "")
		},
		ForceShort: true,
	}, func(t *testing.T) (message.Publisher, message.Subscriber) {
		// Separate instances: the suite closes publisher and subscriber on
		// their own, and one instance shares its connection between both.
		var ps [2]*natsbus.NATS
		for i := range ps {
			n, err := natsbus.New(context.Background(), natsbus.Config{URL: srv.URL(), AckWait: 5 * time.Second, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			ps[i] = n
		}
		return ps[0], ps[1]
	}, nil)
}

func receive(t *testing.T, n *natsbus.NATS, topic string) <-chan bus.Ref {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	msgs, err := n.Subscribe(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	out := make(chan bus.Ref, 10000)
	go func() {
		for m := range msgs {
			r, err := bus.ParseMessage(m)
			m.Ack()
			if err == nil {
				out <- r
			}
		}
	}()
	return out
}

func publish(t *testing.T, n *natsbus.NATS, handler string, from, to int) {
	t.Helper()
	for i := from; i < to; i++ {
		msg, err := bus.NewMessage(bus.Ref{JobID: int64(i), EventID: 1, Handler: handler, Provider: "p", Attempt: 1})
		if err != nil {
			t.Fatal(err)
		}
		if err := n.Publish(bus.Topic(handler), msg); err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
	}
}

func collect(t *testing.T, chans map[string]<-chan bus.Ref, want int, within time.Duration) map[string][]int64 {
	t.Helper()
	got := map[string][]int64{}
	var mu sync.Mutex
	total := 0
	deadline := time.After(within)
	for total < want {
		for name, ch := range chans {
			select {
			case r := <-ch:
				mu.Lock()
				got[name] = append(got[name], r.JobID)
				total++
				mu.Unlock()
			default:
			}
		}
		select {
		case <-deadline:
			t.Fatalf("received %d of %d references: %v", total, want, got)
		case <-time.After(time.Millisecond):
		}
	}
	return got
}

// Two replicas of one consumer share its references; another handler gets
// its own; references published before anyone subscribed are kept.
func TestReplicasShareAHandlerAndHandlersAreSeparate(t *testing.T) {
	srv := natstest.Start(t)
	streamerSide := newNATS(t, srv.URL())
	publish(t, streamerSide, "billing", 1, 101) // nobody subscribed yet
	a, b := newNATS(t, srv.URL()), newNATS(t, srv.URL())
	other := newNATS(t, srv.URL())
	chans := map[string]<-chan bus.Ref{
		"a":     receive(t, a, bus.Topic("billing")),
		"b":     receive(t, b, bus.Topic("billing")),
		"audit": receive(t, other, bus.Topic("audit")),
	}
	publish(t, streamerSide, "billing", 101, 401)
	publish(t, streamerSide, "audit", 1, 51)
	got := collect(t, chans, 450, 30*time.Second)
	seen := map[int64]bool{}
	for _, id := range append(got["a"], got["b"]...) {
		if seen[id] {
			t.Fatalf("billing reference %d delivered to both replicas", id)
		}
		seen[id] = true
	}
	if len(seen) != 400 || len(got["audit"]) != 50 {
		t.Fatalf("billing got %d distinct (want 400), audit %d (want 50)", len(seen), len(got["audit"]))
	}
	if len(got["a"]) == 0 || len(got["b"]) == 0 {
		t.Fatalf("replicas did not share: a=%d b=%d", len(got["a"]), len(got["b"]))
	}
}

// A restart of NATS: publishing fails while it is down (so the streamer gives
// leases back), and works again after, with the old subscription delivering.
// With memory storage the restart loses the stream and the durable: the
// publisher recreates the stream, the subscription its durable.
func TestNATSRestart(t *testing.T) {
	for _, storage := range []string{"file", "memory"} {
		t.Run(storage, func(t *testing.T) { testNATSRestart(t, storage) })
	}
}

func testNATSRestart(t *testing.T, storage string) {
	srv := natstest.Start(t)
	pub := newNATSStorage(t, srv.URL(), storage)
	sub := newNATSStorage(t, srv.URL(), storage)
	ch := receive(t, sub, bus.Topic("h"))
	publish(t, pub, "h", 1, 11)
	collect(t, map[string]<-chan bus.Ref{"h": ch}, 10, 10*time.Second)

	srv.Kill()
	msg, _ := bus.NewMessage(bus.Ref{JobID: 99, EventID: 1, Handler: "h", Attempt: 1})
	testwait.Eventually(t, 10*time.Second, "publish failing with NATS down", func() (bool, string) {
		return pub.Publish(bus.Topic("h"), msg) != nil, "publish succeeded"
	})
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, 30*time.Second, "publish working after the restart", func() (bool, string) {
		m, _ := bus.NewMessage(bus.Ref{JobID: 100, EventID: 1, Handler: "h", Attempt: 1})
		err := pub.Publish(bus.Topic("h"), m)
		return err == nil, fmt.Sprint(err)
	})
	// 99's publish was reported failed, but a publish whose answer was lost
	// may still have been stored (with file storage it then survives the
	// restart): its outcome is unknown, and the streamer gives such a lease
	// back, so a late 99 is allowed; 100 must arrive.
	deadline := time.After(30 * time.Second)
	for {
		select {
		case r := <-ch:
			switch r.JobID {
			case 100:
				return
			case 99:
				continue
			}
			t.Fatalf("got %d, want 100 (or a late 99)", r.JobID)
		case <-deadline:
			t.Fatal(fmt.Sprint("no delivery after the NATS restart (", storage, " storage)"))
		}
	}
}

// A stream's storage cannot change in place; the error says which setting.
func TestNATSStorageValidated(t *testing.T) {
	_, err := natsbus.New(context.Background(), natsbus.Config{URL: "nats://127.0.0.1:1", Storage: "disk"})
	if err == nil || !strings.Contains(err.Error(), "bus.storage") {
		t.Fatalf("storage disk: %v, want an error naming bus.storage", err)
	}
}

// Services started together on a new NATS server (streamers and consumer
// replicas of one deployment) all create or update the one stream at once:
// each must start (JetStream takes a create of an identical stream as done).
func TestServicesStartingTogetherShareTheStream(t *testing.T) {
	srv := natstest.Start(t)
	const services = 8
	buses := make([]*natsbus.NATS, services)
	errs := make(chan error, services)
	var wg sync.WaitGroup
	gate := make(chan struct{})
	for i := range services {
		wg.Go(func() {
			<-gate
			n, err := natsbus.New(context.Background(), natsbus.Config{URL: srv.URL(), AckWait: 5 * time.Second, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				errs <- fmt.Errorf("service %d: %w", i, err)
				return
			}
			buses[i] = n
		})
	}
	close(gate)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for _, n := range buses {
		if n != nil {
			t.Cleanup(func() { n.Close() })
		}
	}
}
