package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/tests"

	"github.com/inlet-dev/inlet/internal/testwait"
)

func TestRefRoundTrip(t *testing.T) {
	t.Parallel()
	in := Ref{JobID: 7, EventID: 3, Handler: "billing", Provider: "stripe", EventType: "invoice.paid", Attempt: 2}
	msg, err := NewMessage(in)
	if err != nil {
		t.Fatal(err)
	}
	if msg.UUID != "7-2" {
		t.Fatalf("uuid = %q", msg.UUID)
	}
	out, err := ParseMessage(msg)
	if err != nil || out != in {
		t.Fatalf("round trip: %+v, %v", out, err)
	}
	// The payload is exactly the reference fields: nothing else can ride along.
	for _, k := range []string{`"job_id"`, `"event_id"`, `"handler"`, `"provider"`, `"event_type"`, `"attempt"`} {
		if !strings.Contains(string(msg.Payload), k) {
			t.Fatalf("payload %s lacks %s", msg.Payload, k)
		}
	}
	if n := strings.Count(string(msg.Payload), `":`); n != 6 {
		t.Fatalf("payload has %d fields, want 6: %s", n, msg.Payload)
	}
	msg.Payload = []byte(`{"job_id":1}`)
	if _, err := ParseMessage(msg); err == nil {
		t.Fatal("a reference without attempt and handler parsed")
	}
}

func TestBatchMessageRoundTrip(t *testing.T) {
	t.Parallel()
	leased := time.Date(2026, 12, 4, 10, 0, 0, 123456000, time.UTC)
	in := []Ref{
		{JobID: 7, EventID: 3, Handler: "billing", Provider: "stripe", EventType: "invoice.paid", Attempt: 2, LeasedAt: leased,
			TraceParent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
		{JobID: 8, EventID: 4, Handler: "billing", Provider: "stripe", EventType: "invoice.paid", Attempt: 1, LeasedAt: leased},
	}
	msg, err := NewBatchMessage(in)
	if err != nil {
		t.Fatal(err)
	}
	if want := "7-2-" + strconv.FormatInt(leased.UnixMicro(), 10) + "+2"; msg.UUID != want {
		t.Fatalf("uuid = %q, want %q", msg.UUID, want)
	}
	if h := msg.Metadata.Get("handler"); h != "billing" {
		t.Fatalf("handler metadata %q", h)
	}
	out, err := ParseRefs(msg)
	if err != nil || !slices.Equal(out, in) {
		t.Fatalf("round trip: %+v, %v", out, err)
	}
	// A message of one reference (NewMessage: streamers with
	// refs_per_message 1, and earlier ones) still parses.
	one, err := NewMessage(in[1])
	if err != nil {
		t.Fatal(err)
	}
	if out, err := ParseRefs(one); err != nil || !slices.Equal(out, in[1:]) {
		t.Fatalf("single reference: %+v, %v", out, err)
	}
	// One bad reference makes the whole message malformed; so does an empty
	// list or one that is not JSON.
	for _, payload := range []string{`[{"job_id":1,"attempt":1,"handler":"h"},{"job_id":2}]`, `[]`, `[{"job_id":1`, ` `} {
		msg.Payload = []byte(payload)
		if refs, err := ParseRefs(msg); err == nil {
			t.Errorf("payload %s parsed: %+v", payload, refs)
		}
	}
	if _, err := NewBatchMessage(nil); err == nil {
		t.Error("a message of no references was made")
	}
}

func TestValidHandlerName(t *testing.T) {
	t.Parallel()
	for name, ok := range map[string]bool{"billing": true, "a-b_c9": true, "": false, "Billing": false, "a.b": false, "a b": false, "a>": false} {
		if err := ValidHandlerName(name); (err == nil) != ok {
			t.Errorf("ValidHandlerName(%q) = %v", name, err)
		}
	}
}

// wait is how long the tests below wait for something that should happen;
// quiet is how long they watch for something that should not.
const (
	wait  = 10 * time.Second
	quiet = 50 * time.Millisecond
)

func setupGoChannel(t *testing.T) PubSub {
	t.Helper()
	ps := NewGoChannel(slog.New(slog.DiscardHandler))
	t.Cleanup(func() { ps.Close() })
	return ps
}

func publishN(t *testing.T, ps PubSub, topic string, from, to int) {
	t.Helper()
	for i := from; i < to; i++ {
		if err := ps.Publish(topic, message.NewMessage(strconv.Itoa(i), nil)); err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
	}
}

func next(t *testing.T, ch <-chan *message.Message) *message.Message {
	t.Helper()
	select {
	case m, ok := <-ch:
		if !ok {
			t.Fatal("subscription closed")
		}
		return m
	case <-time.After(wait):
		t.Fatal("no message")
	}
	return nil
}

func closedWithin(t *testing.T, ch <-chan *message.Message, why string) {
	t.Helper()
	for {
		select {
		case _, open := <-ch:
			if !open {
				return
			}
		case <-time.After(wait):
			t.Fatal(why)
		}
	}
}

func nothing(t *testing.T, ch <-chan *message.Message, why string) {
	t.Helper()
	select {
	case m := <-ch:
		t.Fatalf("%s, got %v", why, m)
	case <-time.After(quiet):
	}
}

// Watermill's universal tests against the in-process transport. Features,
// and why:
//   - ConsumerGroups false: a topic has one queue its subscribers share, as
//     in a NATS queue group; there are no named groups to choose.
//   - ExactlyOnceDelivery true: in one process nothing duplicates a message;
//     it comes again only when its subscriber Nacks it (even after the
//     subscription ended), never after an Ack. This makes the suite read
//     without deduplication, so a message delivered twice, or to two
//     subscribers, fails it. It also skips TestConcurrentClose, which needs
//     messages to outlive their instance (see Persistent; with this false it
//     is the one test that fails), and TestMessageCtx, run below on its own.
//   - GuaranteedOrder false: a Nacked message goes to the back of the queue,
//     and so does one given back by a subscriber that stopped reading.
//   - Persistent false, RequireSingleInstance true: messages live in the
//     instance that queued them; publisher and subscriber must be one.
//   - ForceShort: the long variants publish up to 10,000 messages before
//     subscribing, and Publish waits (by design) once 256 are queued.
func TestGoChannelUniversalPubSub(t *testing.T) {
	features := tests.Features{
		ConsumerGroups:                      false,
		ExactlyOnceDelivery:                 true,
		GuaranteedOrder:                     false,
		GuaranteedOrderWithSingleSubscriber: false,
		Persistent:                          false,
		RequireSingleInstance:               true,
		NewSubscriberReceivesOldMessages:    false,
		ForceShort:                          true,
	}
	constructor := func(t *testing.T) (message.Publisher, message.Subscriber) {
		ps := NewGoChannel(slog.New(slog.DiscardHandler))
		return ps, ps
	}
	tests.TestPubSub(t, features, constructor, nil)

	// A delivery's context comes from the subscription's and ends with the
	// Ack, or with Close. (Skipped above: the suite assumes exactly-once
	// transports drop a second publish of the same id, as NATS does; this
	// one delivers both.)
	t.Run("TestMessageCtxWithoutExactlyOnce", func(t *testing.T) {
		t.Parallel()
		features := features
		features.ExactlyOnceDelivery = false
		tests.TestMessageCtx(t, tests.TestContext{TestID: tests.NewTestID(), Features: features}, constructor)
	})
}

// Replicas subscribed to one topic share its messages: together they get
// each exactly once, more than one of them gets work, and another topic's
// subscriber gets only its own. Messages published before anyone subscribed
// wait for the first subscriber.
func TestGoChannelReplicasShareATopic(t *testing.T) {
	t.Parallel()
	ps := setupGoChannel(t)
	const replicas, early, total = 4, 100, 2000
	publishN(t, ps, Topic("billing"), 0, early)

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var (
		mu       sync.Mutex
		got      = map[string]int{} // message -> deliveries
		perSub   = make([]int, replicas)
		firsts   = make(chan int, replicas)
		release  = make(chan struct{})
		complete = make(chan struct{})
		done     sync.WaitGroup
	)
	for i := range replicas {
		ch, err := ps.Subscribe(ctx, Topic("billing"))
		if err != nil {
			t.Fatal(err)
		}
		done.Go(func() {
			for m := range ch {
				mu.Lock()
				got[m.UUID]++
				perSub[i]++
				n := perSub[i]
				if len(got) == total && got[m.UUID] == 1 {
					close(complete)
				}
				mu.Unlock()
				if n == 1 {
					// Hold the first message unanswered until every replica
					// has one: a replica gets no second message before it
					// answers its first, so the others must be getting
					// theirs from the queue meanwhile.
					firsts <- i
					<-release
				}
				m.Ack()
			}
		})
	}
	audit, err := ps.Subscribe(ctx, Topic("audit"))
	if err != nil {
		t.Fatal(err)
	}

	published := make(chan error, 1)
	go func() {
		for i := early; i < total; i++ {
			if err := ps.Publish(Topic("billing"), message.NewMessage(strconv.Itoa(i), nil)); err != nil {
				published <- err
				return
			}
		}
		published <- nil
	}()
	publishN(t, ps, Topic("audit"), total, total+10)
	for range replicas {
		select {
		case <-firsts:
		case <-time.After(wait):
			mu.Lock()
			defer mu.Unlock()
			t.Fatalf("replicas holding a message did not leave the rest to the others: %v per replica", perSub)
		}
	}
	close(release)
	for range 10 {
		m := next(t, audit)
		if id, _ := strconv.Atoi(m.UUID); id < total {
			t.Fatalf("audit got billing's message %s", m.UUID)
		}
		m.Ack()
	}
	select {
	case <-complete:
	case <-time.After(wait):
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("got %d of %d messages: %v per replica", len(got), total, perSub)
	}
	if err := <-published; err != nil {
		t.Fatal(err)
	}
	nothing(t, audit, "audit got more than its 10")
	cancel()
	done.Wait()

	for id, n := range got {
		if n != 1 {
			t.Errorf("message %s delivered %d times", id, n)
		}
	}
	if len(got) != total {
		t.Errorf("got %d distinct messages, want %d", len(got), total)
	}
	for i, n := range perSub {
		if n == 0 {
			t.Errorf("replica %d got no work: %v per replica", i, perSub)
		}
	}
	t.Logf("messages per replica: %v", perSub)
}

// A subscriber gets its next message only after answering the last; a Nacked
// message comes again, as a fresh delivery, to whichever subscriber is free;
// an Acked one never does.
func TestGoChannelNackRedelivers(t *testing.T) {
	t.Parallel()
	ps := setupGoChannel(t)
	topic := Topic("h")
	a, err := ps.Subscribe(t.Context(), topic)
	if err != nil {
		t.Fatal(err)
	}
	publishN(t, ps, topic, 1, 3)

	first := next(t, a)
	nothing(t, a, "second message before the first was answered")
	first.Nack()
	again := next(t, a)
	if again == first {
		t.Fatal("redelivery reused the Nacked message: its Ack state would be spent")
	}
	if !again.Ack() {
		t.Fatal("redelivered message cannot be Acked")
	}
	var ids []string
	for _, m := range []*message.Message{again, next(t, a)} {
		ids = append(ids, m.UUID)
	}
	slices.Sort(ids)
	if !slices.Equal(ids, []string{"1", "2"}) || first.UUID != "1" {
		t.Fatalf("first %s, then %v; want 1, then 1 and 2", first.UUID, ids)
	}

	// Redelivered to another subscriber: a's subscription ends while it holds
	// a message; b gets it once a Nacks it, and not if a Acks it.
	publishN(t, ps, topic, 3, 5)
	ctx, cancel := context.WithCancel(t.Context())
	c, err := ps.Subscribe(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	// a still holds its last message unanswered, so c gets 3.
	m3 := next(t, c)
	cancel()
	closedWithin(t, c, "subscription open after its context ended")
	b, err := ps.Subscribe(t.Context(), topic)
	if err != nil {
		t.Fatal(err)
	}
	m4 := next(t, b)
	m4.Ack()
	nothing(t, b, "the message c holds was redelivered before c answered")
	m3.Nack()
	if m := next(t, b); m.UUID != m3.UUID {
		t.Fatalf("got %s, want the Nacked %s", m.UUID, m3.UUID)
	} else {
		m.Ack()
	}
	nothing(t, b, "an Acked message came again")
}

// A subscriber that stops reading without ending its subscription keeps no
// message from the others for long.
func TestGoChannelStalledSubscriberGivesBack(t *testing.T) {
	t.Parallel()
	ps := setupGoChannel(t)
	topic := Topic("h")
	if _, err := ps.Subscribe(t.Context(), topic); err != nil { // never read
		t.Fatal(err)
	}
	publishN(t, ps, topic, 1, 4)
	b, err := ps.Subscribe(t.Context(), topic)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for range 3 {
		m := next(t, b)
		if seen[m.UUID] {
			t.Fatalf("message %s twice", m.UUID)
		}
		seen[m.UUID] = true
		m.Ack()
	}
}

// A full topic refuses more at once (ErrFull) while a subscriber reads it,
// so the publisher goes on to other topics instead of waiting on one
// handler's consumer; with nobody subscribed it drops; Close ends the
// subscriptions and makes later calls fail.
func TestGoChannelPublishRefusesWhenFullOrDropsWithoutSubscribersAndFailsAfterClose(t *testing.T) {
	t.Parallel()
	ps := setupGoChannel(t)
	topic := Topic("h")
	publishN(t, ps, topic, 0, queueSize) // fits: nobody subscribed yet
	// Full and nobody subscribes: dropped rather than refused.
	if err := ps.Publish(topic, message.NewMessage("dropped", nil)); err != nil {
		t.Fatalf("publish into a full queue nobody reads: %v", err)
	}
	sub, err := ps.Subscribe(t.Context(), topic)
	if err != nil {
		t.Fatal(err)
	}
	// The subscriber holds one message unanswered: one more fits, then the
	// topic refuses, the first of a batch queued and the rest not.
	first := next(t, sub)
	err = ps.Publish(topic, message.NewMessage("fits", nil), message.NewMessage("refused-1", nil), message.NewMessage("refused-2", nil))
	if !errors.Is(err, ErrFull) || !strings.Contains(err.Error(), "1 of 3 messages queued") {
		t.Fatalf("publish of three into room for one: %v, want ErrFull after 1 of 3", err)
	}
	// Another topic is not held up by the full one.
	other, err := ps.Subscribe(t.Context(), Topic("other"))
	if err != nil {
		t.Fatal(err)
	}
	if err := ps.Publish(Topic("other"), message.NewMessage("elsewhere", nil)); err != nil {
		t.Fatalf("publish to another topic beside a full one: %v", err)
	}
	if m := next(t, other); m.UUID != "elsewhere" {
		t.Fatalf("other topic's message %s", m.UUID)
	} else {
		m.Ack()
	}
	// Taking a message makes room again.
	first.Ack()
	testwait.Eventually(t, wait, "room in the topic once its subscriber acknowledged", func() (bool, string) {
		err := ps.Publish(topic, message.NewMessage("after-ack", nil))
		return err == nil, fmt.Sprint(err)
	})
	// Full again: the refused messages took no room.
	if err := ps.Publish(topic, message.NewMessage("refused-3", nil)); !errors.Is(err, ErrFull) {
		t.Fatalf("publish into the full topic again: %v, want ErrFull", err)
	}

	closed := make(chan error, 1)
	go func() { closed <- ps.Close() }()
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	closedWithin(t, sub, "subscription open after Close")
	closedWithin(t, other, "subscription open after Close")
	if err := ps.Publish(topic, message.NewMessage("late", nil)); !errors.Is(err, ErrClosed) {
		t.Fatalf("publish after Close: %v", err)
	}
	if _, err := ps.Subscribe(t.Context(), topic); !errors.Is(err, ErrClosed) {
		t.Fatalf("subscribe after Close: %v", err)
	}
	if err := ps.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}
