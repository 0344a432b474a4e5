package streamer_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/inlet-dev/inlet/consumers/bus"
	"github.com/inlet-dev/inlet/streamer"
)

// TestSurvivor245_RefusedTopicDoesNotStrandLaterTopics guards the publish
// step's failure handling (DESIGN: the streamer leases, then publishes; a
// publish the bus refuses gives its leases back; "a lost bus message costs
// latency, never data"): when one topic of a claim refuses, the claim's
// other topics are still published, and every lease is either published or
// given back at once. None is left leased and unpublished until the reaper.
//
// Mutant (helper-245): streamer/streamer.go, Streamer.publish, the
// `continue` after collecting a refused topic's leases into `failed`
// changed to `break`: the topics after the refused one in the claim are
// neither published nor given back. TestPublishFailureGivesTheLeaseBack
// refuses every topic (a closed bus), and TestFullTopicDoesNotStopOtherHandlers
// claims in a loop until all references arrive, without looking at what a
// single claim left leased, so neither depended on the loop going on.
func TestSurvivor245_RefusedTopicDoesNotStrandLaterTopics(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, "stuck")
	// The stuck handler's jobs are the oldest, so its topic comes first in
	// the claim.
	b.insertEvents(t, 3)
	time.Sleep(20 * time.Millisecond)
	if _, err := b.admin.Exec(ctx, `INSERT INTO webhook_ingress.subscriptions (handler) VALUES ('fine')`); err != nil {
		t.Fatal(err)
	}
	b.insertEvents(t, 3) // 3 more of stuck's, 3 of fine's
	c := b.collect(t, "fine")

	// The stuck topic is subscribed but never read, and full: the
	// in-process bus refuses it (bus.ErrFull), a real refusal.
	if _, err := b.pubsub.Subscribe(t.Context(), bus.Topic("stuck")); err != nil {
		t.Fatal(err)
	}
	filled := 0
	for {
		err := b.pubsub.Publish(bus.Topic("stuck"), message.NewMessage(watermill.NewUUID(), []byte("filler")))
		if errors.Is(err, bus.ErrFull) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if filled++; filled > 100000 {
			t.Fatal("the stuck topic never filled")
		}
	}

	s := b.newStreamer(t, streamer.Config{BatchSize: 100, LeaseDuration: 10 * time.Minute})
	if _, err := s.ClaimOnce(ctx); err != nil && !errors.Is(err, streamer.ErrPublish) {
		t.Fatal(err)
	}
	if st := s.Stats(); st.Claimed != 9 || st.PublishFailed != 6 {
		t.Fatalf("stats %+v: want 9 claimed, the stuck handler's 6 refused", st)
	}
	// Every lease is published or given back by the time ClaimOnce returns.
	if n := b.count(t, `SELECT count(*) FROM webhook_ingress.jobs WHERE handler = 'stuck' AND status = 'pending' AND lease_holder_id IS NULL`); n != 6 {
		t.Fatalf("%d of the stuck handler's 6 refused jobs given back", n)
	}
	c.wait(t, 3, 30*time.Second)
	if n := b.count(t, `SELECT count(*) FROM webhook_ingress.jobs WHERE handler = 'fine' AND status = 'leased'`); n != 3 {
		t.Fatalf("%d of the fine handler's jobs leased, want its 3 (published)", n)
	}
}
