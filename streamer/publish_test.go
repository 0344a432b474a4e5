package streamer_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/consumers/bus"
	"github.com/inlet-dev/inlet/streamer"
)

// A handler whose in-process topic is full (its consumer subscribed but
// takes nothing) does not hold up the other handlers' references: the full
// topic refuses, its leases are given back, and the streamer goes on. When
// the in-process bus waited for room instead, the streamer stopped on the
// first full topic and published nothing more for anyone.
func TestFullTopicDoesNotStopOtherHandlers(t *testing.T) {
	t.Parallel()
	b := setup(t, "stuck", "fine")
	ctx := context.Background()
	// Subscribed, never read: its queue fills.
	if _, err := b.pubsub.Subscribe(t.Context(), bus.Topic("stuck")); err != nil {
		t.Fatal(err)
	}
	c := b.collect(t, "fine")
	const n = 8500 // more than a topic's queue holds, one reference a message
	b.insertEvents(t, n)
	s := b.newStreamer(t, streamer.Config{BatchSize: 1000, RefsPerMessage: 1, MaxLeasedPerHandler: 2 * n, LeasedRecount: time.Hour})
	got := 0
	deadline := time.Now().Add(30 * time.Second)
	for got < n {
		claimed, _ := s.ClaimOnce(ctx) // ErrPublish for the stuck handler's overflow
		c.mu.Lock()
		got = len(c.refs)
		c.mu.Unlock()
		if claimed == 0 && got < n {
			// A handler whose topic refused is held out of the claims for
			// a while (the other's too, if its reader fell behind).
			if time.Now().After(deadline) {
				t.Fatalf("nothing more to claim with %d of %d references of the other handler published", got, n)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	c.wait(t, n, 10*time.Second)
	if st := s.Stats(); st.PublishFailed == 0 {
		t.Fatalf("no publish refused: %+v", st)
	}
	if leased := b.count(t, `SELECT count(*) FROM webhook_ingress.jobs WHERE handler = 'stuck' AND status = 'leased'`); leased >= n {
		t.Fatalf("%d of the stuck handler's jobs leased, want those its full topic refused given back", leased)
	}
}

// While the bus refuses every reference (here the one handler's in-process
// topic is full) the streamer is not healthy, its /readyz says so, and it is
// again at the first publish the bus takes. It answered ready throughout.
func TestStreamerUnhealthyWhileTheBusRefusesEverything(t *testing.T) {
	t.Parallel()
	b := setup(t, "stuck")
	ctx := context.Background()
	msgs, err := b.pubsub.Subscribe(t.Context(), bus.Topic("stuck")) // not read: its queue fills
	if err != nil {
		t.Fatal(err)
	}
	const n = 8500 // more than a topic's queue holds, one reference a message
	b.insertEvents(t, n)
	s := b.newStreamer(t, streamer.Config{BatchSize: 1000, RefsPerMessage: 1, MaxLeasedPerHandler: 2 * n, LeasedRecount: time.Hour})
	if err := s.Healthy(ctx); err != nil {
		t.Fatalf("unhealthy before any publish: %v", err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for s.Stats().PublishFailed == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the full topic refused nothing")
		}
		if claimed, _ := s.ClaimOnce(ctx); claimed == 0 {
			time.Sleep(20 * time.Millisecond)
		}
	}
	if err := s.Healthy(ctx); err == nil || !strings.Contains(err.Error(), bus.Topic("stuck")) {
		t.Fatalf("Healthy while every publish is refused = %v, want an error naming the topic", err)
	}

	// Drain the topic: the next publish is taken.
	go func() {
		for m := range msgs {
			m.Ack()
		}
	}()
	published := s.Stats().Published
	for s.Stats().Published == published {
		if time.Now().After(deadline) {
			t.Fatalf("nothing published after the topic was drained; Healthy = %v", s.Healthy(ctx))
		}
		if claimed, _ := s.ClaimOnce(ctx); claimed == 0 {
			time.Sleep(20 * time.Millisecond)
		}
	}
	if err := s.Healthy(ctx); err != nil {
		t.Fatalf("unhealthy after a publish the bus took: %v", err)
	}
}
