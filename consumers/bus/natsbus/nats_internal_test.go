package natsbus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/inlet-dev/inlet/consumers/bus"
	"github.com/inlet-dev/inlet/internal/natstest"
	"github.com/inlet-dev/inlet/internal/testwait"
)

// A durable deleted under a subscription is recreated; when consuming the
// new one fails, the subscription retries until it can, and reports itself
// unhealthy meanwhile. (It used to retry nothing: the old consume context
// was stopped, the durable now existed, so the subscription stayed open and
// delivered nothing, still healthy.)
func TestSubscriptionRetriesConsumeAfterRecreatingItsDurable(t *testing.T) {
	srv := natstest.Start(t)
	var failing atomic.Bool
	var failed atomic.Int32 // Consume calls failed
	resumeFault = func() error {
		if failing.Load() {
			failed.Add(1)
			return errors.New("injected consume failure")
		}
		return nil
	}
	t.Cleanup(func() { resumeFault = func() error { return nil } })
	n, topic, publishRef, receive := subscribed(t, srv)
	ctx := context.Background()
	publishRef(1)
	receive(1)
	if err := n.Healthy(); err != nil {
		t.Fatalf("healthy while consuming: %v", err)
	}

	failing.Store(true)
	js, err := jetstream.New(n.conn)
	if err != nil {
		t.Fatal(err)
	}
	if err := js.DeleteConsumer(ctx, StreamName, DurableName(topic)); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, 30*time.Second, "Healthy to report the subscription not consuming", func() (bool, string) {
		err := n.Healthy()
		return err != nil && strings.Contains(err.Error(), DurableName(topic)), fmt.Sprint(err)
	})
	// The recreated durable keeps what is published meanwhile.
	publishRef(2)
	testwait.Eventually(t, 30*time.Second, "Consume of the recreated durable to be retried", func() (bool, string) {
		return failed.Load() >= 3, fmt.Sprint(failed.Load(), " tries")
	})
	if err := n.Healthy(); err == nil {
		t.Fatal("healthy while Consume keeps failing")
	}

	failing.Store(false)
	receive(2)
	testwait.Eventually(t, 30*time.Second, "Healthy again once consuming", func() (bool, string) {
		err := n.Healthy()
		return err == nil, fmt.Sprint(err)
	})
}

// A durable deleted and recreated by someone else (another replica, an
// operator) before this subscription looks: the library has ended its
// consume context, the durable exists, and the subscription consumes it
// again, reporting itself unhealthy while it cannot look the durable up.
// (It used to look only for a missing durable: finding it there, it stayed
// open, delivered nothing and said it was healthy.)
func TestSubscriptionConsumesAgainADurableRecreatedByAnother(t *testing.T) {
	srv := natstest.Start(t)
	gate := make(chan struct{})
	entered := make(chan struct{}, 1)
	var gating atomic.Bool
	beforeConsumerCheck = func() {
		if gating.Load() {
			select {
			case entered <- struct{}{}:
			default:
			}
			<-gate
		}
	}
	var lookupFailing atomic.Bool
	var lookupsFailed atomic.Int32
	consumerCheckFault = func() error {
		if lookupFailing.Load() {
			lookupsFailed.Add(1)
			return errors.New("injected lookup failure")
		}
		return nil
	}
	t.Cleanup(func() {
		beforeConsumerCheck = func() {}
		consumerCheckFault = func() error { return nil }
	})
	n, topic, publishRef, receive := subscribed(t, srv)
	ctx := context.Background()
	publishRef(1)
	receive(1)

	js, err := jetstream.New(n.conn)
	if err != nil {
		t.Fatal(err)
	}
	gating.Store(true)
	lookupFailing.Store(true)
	if err := js.DeleteConsumer(ctx, StreamName, DurableName(topic)); err != nil {
		t.Fatal(err)
	}
	select { // the subscription's check has begun, and waits
	case <-entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the subscription did not check its durable after it was deleted")
	}
	// Another replica recreates the durable before this one looks.
	if _, err := js.CreateOrUpdateConsumer(ctx, StreamName, n.consumerConfig(topic)); err != nil {
		t.Fatal(err)
	}
	gating.Store(false)
	close(gate)

	testwait.Eventually(t, 30*time.Second, "Healthy to report the subscription not consuming", func() (bool, string) {
		err := n.Healthy()
		return err != nil && strings.Contains(err.Error(), DurableName(topic)), fmt.Sprint(err)
	})
	publishRef(2)
	lookupFailing.Store(false)
	receive(2)
	if lookupsFailed.Load() == 0 {
		t.Fatal("the failing lookup was never tried")
	}
	testwait.Eventually(t, 30*time.Second, "Healthy again once consuming", func() (bool, string) {
		err := n.Healthy()
		return err == nil, fmt.Sprint(err)
	})
}

// The library ends the consume context (the durable deleted: a 409), and
// NATS goes away before the subscription looks. restoreConsumer sees the
// connection down and asks nothing, but existingConsumer then asks NATS
// anyway, on a reconnecting connection, for up to 10 s, watching neither
// Close nor anything else: Close waited for it (10-30 s; a reviewer's
// proof). Now a lookup needs a connection and ends when the transport
// closes.
func TestCloseDoesNotWaitForALookupWhileNATSIsAway(t *testing.T) {
	srv := natstest.Start(t)
	var gating atomic.Bool
	entered := make(chan struct{}, 1)
	n, topic, publishRef, receive := subscribed(t, srv)
	beforeConsumerCheck = func() {
		if !gating.CompareAndSwap(true, false) {
			return
		}
		srv.Kill()
		deadline := time.Now().Add(10 * time.Second)
		for n.conn.IsConnected() && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		entered <- struct{}{}
	}
	var lookups atomic.Int32
	consumerCheckFault = func() error { lookups.Add(1); return nil }
	t.Cleanup(func() {
		beforeConsumerCheck = func() {}
		consumerCheckFault = func() error { return nil }
	})
	publishRef(1)
	receive(1)

	js, err := jetstream.New(n.conn)
	if err != nil {
		t.Fatal(err)
	}
	gating.Store(true)
	// Its reply may be lost: the check it sets off kills the server.
	go js.DeleteConsumer(context.Background(), StreamName, DurableName(topic)) //nolint:errcheck // the reply may be lost with the killed server; the check it sets off is what is tested
	select {
	case <-entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the subscription did not check its durable after it was deleted")
	}
	if n.conn.IsConnected() {
		t.Fatal("still connected after the server was killed")
	}
	time.Sleep(200 * time.Millisecond) // into existingConsumer's lookup
	start := time.Now()
	n.Close()
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("Close took %v: it waited for a subscription's lookup of its durable on a connection that is down (existingConsumer's lookups: %d)", took.Round(100*time.Millisecond), lookups.Load())
	}
}

// A subscription that stops while its receiver holds a message waits for
// the receiver's decision instead of nacking the message itself. The
// consumer service acknowledges a message once an attempt has a slot; when
// that raced Stop, the subscription nacked it, and NATS handed the reference
// to another replica at once, which ran the same attempt a second time
// (fenced, but run twice).
func TestStopWaitsForTheReceiversAck(t *testing.T) {
	srv := natstest.Start(t)
	newTransport := func() *NATS {
		n, err := New(context.Background(), Config{URL: srv.URL(), AckWait: time.Minute, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { n.Close() })
		return n
	}
	topic := bus.Topic("h")
	a, b := newTransport(), newTransport()
	actx, acancel := context.WithCancel(context.Background())
	t.Cleanup(acancel)
	amsgs, err := a.Subscribe(actx, topic)
	if err != nil {
		t.Fatal(err)
	}
	publish := func(id int64) {
		t.Helper()
		msg, err := bus.NewMessage(bus.Ref{JobID: id, EventID: 1, Handler: "h", Provider: "p", Attempt: 1})
		if err != nil {
			t.Fatal(err)
		}
		if err := a.Publish(topic, msg); err != nil {
			t.Fatal(err)
		}
	}
	publish(1)
	var held *message.Message
	select {
	case held = <-amsgs:
	case <-time.After(30 * time.Second):
		t.Fatal("replica A received nothing")
	}
	// Replica B joins; A stops while it holds reference 1, and acknowledges
	// it just after (its attempt got a slot as Stop began).
	bctx, bcancel := context.WithCancel(context.Background())
	t.Cleanup(bcancel)
	bmsgs, err := b.Subscribe(bctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	acancel()
	time.Sleep(50 * time.Millisecond) // the ack comes after Stop
	held.Ack()

	publish(2)
	select {
	case m := <-bmsgs:
		r, err := bus.ParseMessage(m)
		m.Ack()
		if err != nil {
			t.Fatal(err)
		}
		if r.JobID != 2 {
			t.Fatalf("replica B received reference %d, want 2: A's stop handed on a reference A had acknowledged", r.JobID)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("replica B received nothing")
	}
}

// subscribed starts a transport on srv subscribed to handler h's topic,
// acknowledging what it receives, with publishRef to publish a reference
// and receive to wait for one (an earlier one may come again: its
// acknowledgement can be lost with a deleted durable).
func subscribed(t *testing.T, srv *natstest.Server) (n *NATS, topic string, publishRef, receive func(id int64)) {
	t.Helper()
	n, err := New(context.Background(), Config{URL: srv.URL(), AckWait: 5 * time.Second, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)

	topic = bus.Topic("h")
	msgs, err := n.Subscribe(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan int64, 10)
	go func() {
		for m := range msgs {
			r, err := bus.ParseMessage(m)
			m.Ack()
			if err == nil {
				got <- r.JobID
			}
		}
	}()
	publishRef = func(id int64) {
		t.Helper()
		msg, err := bus.NewMessage(bus.Ref{JobID: id, EventID: 1, Handler: "h", Provider: "p", Attempt: 1})
		if err != nil {
			t.Fatal(err)
		}
		if err := n.Publish(topic, msg); err != nil {
			t.Fatalf("publish %d: %v", id, err)
		}
	}
	receive = func(id int64) {
		t.Helper()
		deadline := time.After(30 * time.Second)
		for {
			select {
			case r := <-got:
				if r == id {
					return
				}
				if r > id {
					t.Fatalf("received %d, want %d", r, id)
				}
			case <-deadline:
				t.Fatalf("reference %d not delivered within 30s", id)
			}
		}
	}
	return n, topic, publishRef, receive
}

// A handler's durable is inlet_HANDLER; a role's topic of a shared handler
// (bus.RoleTopic) gets inlet_-ROLE-HANDLER: no dot (not allowed in a
// durable name), and never another handler's or role's (handler names start
// with a letter or digit, role names have no '-').
func TestDurableNames(t *testing.T) {
	t.Parallel()
	for topic, want := range map[string]string{
		bus.Topic("billing"): "inlet_billing",
		bus.Topic("a-b_c"):   "inlet_a-b_c",
		bus.RoleTopic("billing", "webhook_consumer_payments"): "inlet_-webhook_consumer_payments-billing",
		bus.RoleTopic("a-b", "webhook_consumer_x"):            "inlet_-webhook_consumer_x-a-b",
	} {
		if got := DurableName(topic); got != want {
			t.Errorf("DurableName(%q) = %q, want %q", topic, got, want)
		}
	}
}
