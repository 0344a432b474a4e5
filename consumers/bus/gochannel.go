package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
)

// ErrClosed is returned by Publish and Subscribe once the in-process
// transport is closed.
var ErrClosed = errors.New("in-process bus is closed")

// ErrFull is returned by Publish when the topic's queue is full while some
// subscriber reads it: the publisher (the streamer) gives the references'
// leases back, to publish them again later.
var ErrFull = errors.New("in-process bus topic is full")

// queueSize bounds each topic's queue. The streamer's own limit holds first:
// it leases at most streamer.max_leased_per_handler (default 5,000) of a
// handler's jobs, and each message carries at least one, so a topic fills
// only when references whose leases have since expired pile up behind a
// handler that takes no more (or with that limit set above queueSize).
const queueSize = 8192

// giveBackAfter is how long a subscription keeps a message its subscriber
// has not come to read before putting it back for the topic's other
// subscribers. Healthy subscribers read again right after they acknowledge,
// so this only rescues messages from a subscriber that stopped reading
// without cancelling its subscription.
const giveBackAfter = 100 * time.Millisecond

// goChannel is the in-process transport. Unlike watermill's gochannel, which
// gives every subscriber of a topic every message, the subscribers of a
// topic compete for its messages like a NATS queue group: a topic is one
// handler's jobs, and replicas of a consumer must share them, not each run
// every job.
//
// Each topic has one bounded queue; each subscription has a goroutine that
// takes the next message from it once its subscriber acknowledged the last,
// so a busy subscriber leaves the queue to idle ones.
type goChannel struct {
	log     *slog.Logger
	closing chan struct{}
	running sync.WaitGroup // subscription goroutines; Close waits so their channels are closed when it returns

	mu     sync.Mutex
	closed bool
	topics map[string]chan *message.Message
	// subs counts each topic's live subscriptions: a full queue that nobody
	// reads drops instead of blocking the publisher (see Publish).
	subs map[string]int
}

func newGoChannel(logger *slog.Logger) *goChannel {
	if logger == nil {
		logger = slog.Default()
	}
	return &goChannel{
		log:     logger.With(slog.String("component", "bus")),
		closing: make(chan struct{}),
		topics:  map[string]chan *message.Message{},
		subs:    map[string]int{},
	}
}

// queue returns topic's queue, made on first use so that messages published
// before anyone subscribed wait for the first subscriber.
func (g *goChannel) queue(topic string) chan *message.Message {
	q, ok := g.topics[topic]
	if !ok {
		q = make(chan *message.Message, queueSize)
		g.topics[topic] = q
	}
	return q
}

// Publish queues msgs on topic. It never waits: when the queue is full and
// some subscriber reads it, it returns ErrFull for the messages that did not
// fit (those before them are queued), so that one handler whose consumer
// takes nothing cannot stall the publishing of every other handler's
// references, as waiting for room did.
func (g *goChannel) Publish(topic string, msgs ...*message.Message) error {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return fmt.Errorf("publish to %s: %w", topic, ErrClosed)
	}
	q := g.queue(topic)
	g.mu.Unlock()
	for i, m := range msgs {
		// The publisher may reuse its message; the queue keeps its own.
		c := m.Copy()
		// A select picks at random among ready cases: check closing first so
		// that nothing is queued once Close has begun.
		select {
		case <-g.closing:
			return fmt.Errorf("publish to %s: %w", topic, ErrClosed)
		default:
		}
		select {
		case q <- c:
			continue
		default:
		}
		// Full. With subscribers, refuse the rest: the streamer gives
		// their leases back at once. With none (a handler whose consumer
		// is not in this process), drop the reference: its lease expires
		// and, no consumer being alive, the attempt is not counted.
		g.mu.Lock()
		n := g.subs[topic]
		g.mu.Unlock()
		if n == 0 {
			g.log.Debug("dropped a reference: its topic's queue is full and nobody subscribes", slog.String("topic", topic))
			continue
		}
		return fmt.Errorf("publish to %s: %d of %d messages queued, then %w (%d messages)", topic, i, len(msgs), ErrFull, queueSize)
	}
	return nil
}

// Subscribe returns a channel of topic's messages that this subscriber gets
// instead of, not as well as, the topic's other subscribers. The channel is
// closed when ctx ends or the transport is closed.
func (g *goChannel) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return nil, fmt.Errorf("subscribe to %s: %w", topic, ErrClosed)
	}
	out := make(chan *message.Message)
	g.subs[topic]++
	g.running.Add(1)
	go g.serve(ctx, topic, g.queue(topic), out)
	return out, nil
}

// Close closes every subscription's channel and makes Publish and Subscribe
// fail. Messages still queued are dropped: their leases in Postgres expire and
// the streamer publishes them again. Close can be called more than once.
func (g *goChannel) Close() error {
	g.mu.Lock()
	if !g.closed {
		g.closed = true
		close(g.closing)
	}
	g.mu.Unlock()
	g.running.Wait()
	return nil
}

// serve feeds one subscription until its ctx ends or the transport closes.
// A message it took from the queue is not lost when the subscription ends:
// it goes back for the other subscribers unless the subscriber acknowledged
// it.
func (g *goChannel) serve(ctx context.Context, topic string, q chan *message.Message, out chan<- *message.Message) {
	defer g.running.Done()
	g.log.Debug("subscribed", slog.String("topic", topic))
	held, delivered := g.feed(ctx, q, out)
	g.mu.Lock()
	g.subs[topic]--
	g.mu.Unlock()
	close(out)
	g.log.Debug("subscription ended", slog.String("topic", topic))
	if delivered != nil {
		// The subscriber still has it and may yet acknowledge it: wait for
		// its answer rather than risk running the message twice.
		select {
		case <-delivered.Acked():
			return
		case <-delivered.Nacked():
		case <-g.closing:
			return
		}
	}
	if held != nil {
		select {
		case q <- held:
		case <-g.closing:
		}
	}
}

// feed delivers messages from q to out, one at a time: the next only after
// the subscriber acknowledged (Ack or Nack) the last, as watermill expects.
// When ctx ends or the transport closes it returns the message it holds, if
// any, and that message's delivery if the subscriber received it but has not
// answered yet.
func (g *goChannel) feed(ctx context.Context, q chan *message.Message, out chan<- *message.Message) (held, delivered *message.Message) {
	patience := time.NewTimer(giveBackAfter)
	defer patience.Stop()
	for {
		if held == nil {
			select {
			case held = <-q:
			case <-ctx.Done():
				return nil, nil
			case <-g.closing:
				return nil, nil
			}
		}
		// Each delivery is a copy, so that a redelivery after a Nack starts
		// with fresh Ack state; its context ends with the delivery.
		d := held.Copy()
		dctx, cancel := context.WithCancel(ctx)
		d.SetContext(dctx)
		patience.Reset(giveBackAfter)
		select {
		case out <- d:
		case <-patience.C:
			cancel()
			held = giveBack(q, held)
			continue
		case <-ctx.Done():
			cancel()
			return held, nil
		case <-g.closing:
			cancel()
			return held, nil
		}
		select {
		case <-d.Acked():
			held = nil
		case <-d.Nacked():
			held = giveBack(q, held)
		case <-ctx.Done():
			cancel()
			return held, d
		case <-g.closing:
			cancel()
			return held, d
		}
		cancel()
	}
}

// giveBack puts m at the back of q, where any subscriber (this one too) can
// take it, and returns nil; if q is full it returns m for this subscription
// to offer again, since waiting for room could wait for this subscriber
// itself.
func giveBack(q chan<- *message.Message, m *message.Message) *message.Message {
	select {
	case q <- m:
		return nil
	default:
		return m
	}
}
