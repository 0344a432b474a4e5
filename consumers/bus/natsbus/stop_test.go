package natsbus_test

import (
	"context"
	"log/slog"
	"sort"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/inlet-dev/inlet/consumers/bus"
	"github.com/inlet-dev/inlet/consumers/bus/natsbus"
	"github.com/inlet-dev/inlet/internal/natstest"
)

// Found by review helper-85: a subscription that stops drops, without a nack,
// the references the JetStream library had already pulled into its buffer
// but not yet handed to the receiver. The package doc promises the opposite:
// "A subscription that stops (its context done, or Close) nacks what it had
// not handed out". Subscribe's stop path closes `stop` and calls cc.Stop()
// at once (consumers/bus/natsbus/nats.go:420-423); cc.Stop()
// unsubscribes the pull subscription's inbox, so the messages still in the
// client's pending buffer (up to PullMaxMessages(64) messages of up to 32
// references each) are never passed to deliver and never nacked. JetStream
// gives them to another replica only after AckWait (30 s by default), so a
// rolling restart of one consumer replica stalls up to ~2000 jobs for
// AckWait although a healthy replica is idle.
//
// Deterministic here: the stopping replica's receiver holds one message
// without deciding (the 2 s stopDecisionWait), so the library's delivery
// goroutine is busy while cc.Stop() unsubscribes; the other 9 buffered
// messages are then dropped.
//
// Expected: every reference A had not handed out reaches replica B promptly
// (a nack), well within AckWait. Actual: only after AckWait.
func TestStopNacksBufferedReferences(t *testing.T) {
	srv := natstest.Start(t)
	const ackWait = 30 * time.Second
	newT := func() *natsbus.NATS {
		n, err := natsbus.New(context.Background(), natsbus.Config{URL: srv.URL(), AckWait: ackWait, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { n.Close() })
		return n
	}
	topic := bus.Topic("h")
	a, b := newT(), newT()
	actx, acancel := context.WithCancel(context.Background())
	t.Cleanup(acancel)
	amsgs, err := a.Subscribe(actx, topic)
	if err != nil {
		t.Fatal(err)
	}
	const total = 10
	publish(t, a, "h", 1, total+1)

	// Replica A's receiver takes the first reference and holds it (its
	// attempt waits for a slot); the rest sit in A's pull buffer.
	var held *message.Message
	select {
	case held = <-amsgs:
	case <-time.After(30 * time.Second):
		t.Fatal("replica A received nothing")
	}
	_ = held
	// Wait until JetStream has delivered all of them to A (ack pending).
	nc, err := nats.Connect(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := js.Consumer(context.Background(), natsbus.StreamName, natsbus.DurableName(topic))
		if err != nil {
			t.Fatal(err)
		}
		info, err := c.Info(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if info.NumAckPending == total {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("JetStream has %d of %d references pending with A", info.NumAckPending, total)
		}
		time.Sleep(20 * time.Millisecond)
	}

	// Replica B is up and idle; A stops (a rolling restart).
	bch := receive(t, b, topic)
	stopped := time.Now()
	acancel()

	var got []int64
	limit := time.After(8 * time.Second) // the held one comes after 2 s; AckWait is 30 s
	for len(got) < total {
		select {
		case r := <-bch:
			got = append(got, r.JobID)
		case <-limit:
			sort.Slice(got, func(i, j int) bool { return got[i] < got[j] })
			t.Fatalf("%s after replica A stopped, replica B has %d of %d references (%v): the rest were dropped from A's pull buffer without a nack and wait for AckWait (%s)",
				time.Since(stopped).Round(time.Second), len(got), total, got, ackWait)
		}
	}
}
