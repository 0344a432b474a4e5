package streamer_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/consumers/bus"
	"github.com/inlet-dev/inlet/streamer"
)

// One handler's full in-process topic (its consumer subscribed and
// stalled, references of expired leases piling up behind it, as bus's
// queueSize comment describes) must not hold up the other handlers'
// references (DESIGN: "handler A failing never retries handler B";
// bus.NewGoChannel: "one handler's stalled consumer does not hold up the
// others' references"; TestFullTopicDoesNotStopOtherHandlers): the refused
// handler is held out of the claims, the loop goes on for the others. (Found
// by a review: the loop took the one topic's ErrPublish for an error of the
// whole round and backed off up to 5s; the stalled handler's given-back job
// being due again at once, every round failed, and the healthy handler's
// new jobs waited up to 5s per round whatever PollInterval said.)
func TestFullTopicOfOneHandlerDoesNotSlowTheOthers(t *testing.T) {
	t.Parallel()
	b := setup(t, "stuck", "fine")
	ctx := context.Background()
	// Subscribed, never read.
	if _, err := b.pubsub.Subscribe(t.Context(), bus.Topic("stuck")); err != nil {
		t.Fatal(err)
	}
	// The stalled handler's topic is full of references of expired leases.
	for i := int64(1); ; i++ {
		msg, err := bus.NewMessage(bus.Ref{JobID: i, Attempt: 1, Handler: "stuck"})
		if err != nil {
			t.Fatal(err)
		}
		err = b.pubsub.Publish(bus.Topic("stuck"), msg)
		if errors.Is(err, bus.ErrFull) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if i > 100000 {
			t.Fatal("topic never full")
		}
	}
	c := b.collect(t, "fine")
	s := b.newStreamer(t, streamer.Config{PollInterval: 100 * time.Millisecond})
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer s.Stop()

	b.insertEvents(t, 1) // a job for each handler
	c.wait(t, 1, 5*time.Second)
	// The stuck handler's job is refused, given back, claimed again, ...
	deadline := time.Now().Add(20 * time.Second)
	for s.Stats().PublishFailed < 7 {
		if time.Now().After(deadline) {
			t.Fatalf("stats %+v", s.Stats())
		}
		time.Sleep(5 * time.Millisecond)
	}
	// A new event for the healthy handler: polling every 100ms, it should be
	// published well within a second.
	start := time.Now()
	b.insertEvents(t, 1)
	select {
	case <-c.got:
		t.Logf("healthy handler's reference after %s", time.Since(start))
	case <-time.After(2 * time.Second):
		c.wait(t, 1, 10*time.Second)
		t.Fatalf("healthy handler's reference published only after %s (PollInterval 100ms): the other handler's full topic "+
			"backs the whole claim loop off (stats %+v)", time.Since(start).Round(10*time.Millisecond), s.Stats())
	}
}
