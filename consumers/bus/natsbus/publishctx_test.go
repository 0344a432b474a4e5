package natsbus_test

import (
	"context"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/inlet-dev/inlet/consumers/bus"
	"github.com/inlet-dev/inlet/consumers/bus/natsbus"
)

// TestPublishContextDoneSendsNothing: once its context has ended,
// PublishContext sends nothing.
//
// Regression test (review helper-114; fixed: the text describes the
// behaviour before the fix). In 269491d PublishContext sends every message with
// PublishMsgAsync first and looks at ctx only while awaiting the acks
// (consumers/bus/natsbus/nats.go:251-273). With a ctx that has already
// ended it still hands all the references to JetStream, which stores them,
// and then returns "JetStream had not acknowledged all N messages: context
// deadline exceeded" at once. The streamer (streamer/streamer.go:741-770)
// shares one deadline across a round's topics: once a slow topic has used
// it up, every later topic is published this way, reported failed, and its
// leases are given back (ReleaseJobs, which does not look at worker_id)
// while the references sit in the stream: a stored reference looks
// unpublished, a consumer may take it and run the handler while the job is
// pending again and is leased and published a second time (the handler runs
// twice, one outcome fenced), and inlet_streamer_publish_failed counts
// references that were in fact delivered.
//
// Expected: a PublishContext whose ctx has ended sends nothing (it fails
// before PublishMsgAsync), so "failed" means "not in the stream", as
// Publish's doc promises for the give-back.
func TestPublishContextDoneSendsNothing(t *testing.T) {
	n, srv := newStreamerBus(t)
	ctx := context.Background()
	topic := bus.Topic("review_billing")

	// The round's shared deadline has passed (an earlier topic used it up).
	done, cancel := context.WithCancel(ctx)
	cancel()
	msgs := make([]*message.Message, 50)
	for i := range msgs {
		msgs[i] = message.NewMessage(watermill.NewUUID(), []byte(`{"job_id":1}`))
	}
	perr := n.PublishContext(done, topic, msgs...)
	if perr == nil {
		t.Skip("every ack won the race against an ended context; nothing to judge")
	}

	// What the stream holds for the topic.
	nc, err := nats.Connect(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	var stored uint64
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		s, err := js.Stream(ctx, natsbus.StreamName)
		if err != nil {
			t.Fatal(err)
		}
		info, err := s.Info(ctx, jetstream.WithSubjectFilter(topic))
		if err != nil {
			t.Fatal(err)
		}
		stored = info.State.Msgs
		if stored == uint64(len(msgs)) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if stored > 0 {
		t.Errorf("PublishContext with an ended context returned %q (the streamer gives the leases back), "+
			"yet JetStream stored %d of its %d references: consumers get references of jobs that are pending again",
			perr, stored, len(msgs))
	}
}
