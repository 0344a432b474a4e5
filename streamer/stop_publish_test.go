package streamer_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/inlet-dev/inlet/consumers/bus"
	"github.com/inlet-dev/inlet/consumers/bus/natsbus"
	"github.com/inlet-dev/inlet/internal/natstest"
	"github.com/inlet-dev/inlet/streamer"
)

// TestStopIsBoundedWhileJetStreamDoesNotAnswer: Stop stays within its
// bound while JetStream acknowledges nothing: a round's publishes share one
// deadline (natsbus PublishContext).
//
// Regression test (review helper-113; fixed: the text describes the
// behaviour before the fix). Streamer.Stop promises to wait "at most claimRoundTimeout, and
// giveBackTimeout more … (15 s in all)" (streamer.go:297-303; deployments
// README: SIGTERM "finishes its claim round (at most a few seconds)"), but the
// claim round's deadline (claimRound's 10 s context) does not reach the
// publish: publish (streamer.go:736) calls Publisher.Publish once per topic,
// in sequence, and natsbus.Publish takes no context and waits up to its own
// publishTimeout (10 s, natsbus/nats.go:207) for JetStream's acks. While
// JetStream does not answer (a stream leader without quorum, an overloaded
// server), one round that leased jobs of K handlers runs K × 10 s, plus the
// give-back: Stop (and every claim round meanwhile) takes 30 s with three
// handlers, twice what it promises; under Kubernetes' default 30 s grace
// the streamer is SIGKILLed mid-round, its leases not given back.
//
// Here: three handlers with one due job each, the bus a real natsbus on a
// real nats-server whose stream is gone while a subscriber that never
// replies listens on inlet.jobs.> (so publishes reach someone and no ack
// comes). Stop is called once the round's leases are committed (its
// publish under way).
//
// Expected: Stop returns within 15 s (the round's deadline bounds the
// publishing too; what was not published is given back).
// Actual: Stop takes about 30 s.
func TestStopIsBoundedWhileJetStreamDoesNotAnswer(t *testing.T) {
	t.Cleanup(natstest.Cleanup)
	b := setup(t, "h1", "h2", "h3")
	srv := natstest.Start(t)
	ctx := context.Background()
	n, err := natsbus.New(ctx, natsbus.Config{URL: srv.URL(), Name: "inlet-streamer", Replicas: 1, Storage: "file", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })

	// JetStream stops answering publishes.
	side, err := nats.Connect(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(side.Close)
	js, err := jetstream.New(side)
	if err != nil {
		t.Fatal(err)
	}
	if err := js.DeleteStream(ctx, natsbus.StreamName); err != nil {
		t.Fatal(err)
	}
	if _, err := side.Subscribe(bus.TopicPrefix+">", func(*nats.Msg) {}); err != nil {
		t.Fatal(err)
	}
	if err := side.Flush(); err != nil {
		t.Fatal(err)
	}

	b.insertEvents(t, 1) // one job per handler
	s := b.newStreamer(t, streamer.Config{Publisher: n, PollInterval: 50 * time.Millisecond, LeaseDuration: 10 * time.Minute})
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for b.count(t, `SELECT count(*) FROM webhook_ingress.jobs WHERE status = 'leased'`) < 3 {
		if time.Now().After(deadline) {
			s.Stop()
			t.Fatal("control: the three jobs were not leased within 10 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond) // the round is publishing now

	start := time.Now()
	s.Stop()
	took := time.Since(start)
	t.Logf("Stop took %s", took.Round(time.Millisecond))
	if took > 15*time.Second {
		t.Fatalf("Stop took %s while JetStream did not answer, want at most 15 s (claimRoundTimeout + giveBackTimeout, "+
			"as Stop's doc promises): each of the round's 3 topics waited natsbus' 10 s publish timeout in turn",
			took.Round(time.Millisecond))
	}
}
