package natsbus_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/inlet-dev/inlet/consumers/bus"
	"github.com/inlet-dev/inlet/consumers/bus/natsbus"
	"github.com/inlet-dev/inlet/internal/natstest"
)

// TestPublishRecoversAfterJetStreamStoppedAnswering: publishing works again
// once JetStream answers, after a publish whose acknowledgements never came
// (they expire: jetstream.WithPublishAsyncTimeout).
//
// Regression test (review helper-113; fixed: the text describes the
// behaviour before the fix). NATS.Publish sends with jetstream's PublishMsgAsync on a JetStream
// context made by jetstream.New(conn) with no async ack timeout
// (nats.go:162), and when its own 10 s publishTimeout fires it returns
// without giving up the futures still pending (nats.go:239). A publish
// acknowledgement that never comes while the connection stays up (a stream
// leader that lost quorum or is overloaded, a JetStream that does not answer
// within publishTimeout) leaves its future in the JetStream context's
// pending-ack table forever; nothing removes it but a reconnect. Once 4,000
// of them have piled up (nats.go's default max pending async publishes),
// every later PublishMsgAsync stalls 200 ms and fails with
// ErrTooManyStalledMsgs: the streamer can never publish again, even though
// JetStream is healthy again. Every claim's leases are given back, every
// handler is held, no job is delivered until the process is restarted, and
// `inlet streamer` stays ready (/readyz checks only the database).
//
// Here a real nats-server stands in for a JetStream that stops answering by
// losing its stream while a plain subscriber (which never replies) listens
// on inlet.jobs.>: the publishes reach someone, and no ack comes, as with a
// stream leader without quorum. One streamer claim's worth of messages
// times out. Then JetStream is back (a second process recreates the stream,
// the silent subscriber goes away) and a fresh connection publishes at once.
//
// Expected: the first transport's next publishes succeed too, as soon as
// JetStream answers again.
// Actual: each fails with "nats: stalled with too many outstanding async
// published messages", indefinitely.
// newStreamerBus is a bus on a nats-server of its own, as `inlet streamer`
// opens it (bus: defaults filled in).
func newStreamerBus(t *testing.T) (*natsbus.NATS, *natstest.Server) {
	t.Helper()
	srv := natstest.Start(t)
	n, err := natsbus.New(context.Background(), natsbus.Config{URL: srv.URL(), Name: "inlet-streamer", Replicas: 1, Storage: "file",
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	return n, srv
}

func TestPublishRecoversAfterJetStreamStoppedAnswering(t *testing.T) {
	n, srv := newStreamerBus(t)
	ctx := context.Background()
	quiet := slog.New(slog.DiscardHandler)
	topic := bus.Topic("billing")
	msgs := func(from, count int) []*message.Message {
		out := make([]*message.Message, 0, count)
		for i := range count {
			m, err := bus.NewMessage(bus.Ref{JobID: int64(from + i), EventID: 1, Handler: "billing", Provider: "stripe", Attempt: 1})
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, m)
		}
		return out
	}
	if err := n.Publish(topic, msgs(1, 1)...); err != nil {
		t.Fatalf("control: publish with JetStream up: %v", err)
	}

	// JetStream stops answering publishes on inlet.jobs.>: the stream is
	// gone and a subscriber that never replies takes the messages.
	side, err := nats.Connect(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer side.Close()
	js, err := jetstream.New(side)
	if err != nil {
		t.Fatal(err)
	}
	if err := js.DeleteStream(ctx, natsbus.StreamName); err != nil {
		t.Fatal(err)
	}
	silent, err := side.Subscribe(bus.TopicPrefix+">", func(*nats.Msg) {})
	if err != nil {
		t.Fatal(err)
	}
	if err := side.Flush(); err != nil {
		t.Fatal(err)
	}
	// One claim round of a streamer with batch_size 4000 and
	// refs_per_message 1 (or many rounds of smaller ones): not acknowledged.
	start := time.Now()
	err = n.Publish(topic, msgs(1000, 4000)...)
	if err == nil {
		t.Fatal("control: publish succeeded while nothing stores the messages")
	}
	t.Logf("publish while JetStream does not answer failed after %s: %v", time.Since(start).Round(time.Millisecond), err)

	// JetStream answers again: the silent subscriber is gone and another
	// process (a streamer or consumer starting) recreates the stream.
	if err := silent.Unsubscribe(); err != nil {
		t.Fatal(err)
	}
	if err := side.Flush(); err != nil {
		t.Fatal(err)
	}
	other, err := natsbus.New(ctx, natsbus.Config{URL: srv.URL(), Name: "inlet-streamer-2", Replicas: 1, Storage: "file", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if err := other.Publish(topic, msgs(9000, 1)...); err != nil {
		t.Fatalf("control: a fresh connection cannot publish either, JetStream is not back: %v", err)
	}

	// The first transport (the long-running streamer) publishes again.
	var last error
	for try := 0; try < 10; try++ {
		if last = n.Publish(topic, msgs(10000+try, 1)...); last == nil {
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
	stalled := strings.Contains(last.Error(), "stalled")
	t.Fatalf("JetStream answers again (a fresh connection publishes), but this transport still cannot publish "+
		"after 10 tries over ~7 s (stalled on unanswered acks: %v): %v", stalled, last)
}
