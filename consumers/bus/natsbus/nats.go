package natsbus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wmnats "github.com/ThreeDotsLabs/watermill-nats/v2/pkg/nats"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/inlet-dev/inlet/consumers/bus"
)

// StreamName is the JetStream stream every handler topic lives in. It is a
// work queue: a reference is removed once a consumer acknowledges it.
const StreamName = "INLET_JOBS"

// Config configures the JetStream transport.
type Config struct {
	// URL of the NATS server(s), comma-separated. Required.
	URL string
	// Name identifies the connection on the server (monitoring). Defaults to
	// "inlet".
	Name string
	// AckWait is how long JetStream waits for a consumer to acknowledge a
	// reference before redelivering it. Consumers acknowledge once a
	// handler slot takes the reference (Postgres holds the lease), so this
	// covers a consumer that dies before that, and a reference that waits
	// longer for a slot: redelivered, it may run its attempt twice, and the
	// second outcome is fenced (docs/pipeline.md). Defaults to 30s.
	AckWait time.Duration
	// MaxAge bounds how long an unconsumed reference stays in the stream
	// (the lease expiry republishes it anyway). Defaults to 24h.
	MaxAge time.Duration
	// Replicas of the stream in a NATS cluster. Defaults to 1. With
	// Replicas and Storage both unset, an existing stream is used as it is
	// (made by the streamer, whose settings it keeps), and one lost later (a
	// NATS restart with memory storage) is made again with the settings of
	// the stream last found; with no stream there, it is made with the
	// defaults and marked so (metadata inlet.defaults), and a process with
	// settings of its own replaces it if its storage differs. Set either,
	// and the stream is made or updated to them (inlet's services pass bus:
	// from their config file); a stream of other storage fails New (JetStream
	// cannot change it in place).
	Replicas int
	// Storage of the stream: "file" (the default: references survive a
	// NATS restart) or "memory" (a restart loses the references in flight;
	// the transport recreates the stream and its durable consumers, and the
	// streamer's lease expiry publishes the lost references again).
	Storage string
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// NATS is the JetStream transport: one connection, the INLET_JOBS stream
// (created or updated at start), and a durable consumer per handler whose
// replicas share the handler's references (a queue group), while different
// handlers each get their own.
type NATS struct {
	conn    *nats.Conn
	js      jetstream.JetStream
	cfg     Config
	adopt   bool // the stream's settings are not this process's (ensureStream)
	ackWait time.Duration
	pub     *wmnats.Publisher
	log     *slog.Logger

	mu      sync.Mutex
	closing chan struct{}
	// stream is INLET_JOBS as this process makes it again once it is lost:
	// with cfg's settings, or in adopt mode with those of the stream it
	// last found (a NATS restart loses a memory stream, and the streamer's
	// settings, not the defaults, must come back).
	stream jetstream.StreamConfig
	// streamLost is when a subscription's check first found the stream
	// missing that this process knows as made with the defaults (zero
	// while it is there): leaveToOwner.
	streamLost time.Time
	// streamChecked is when a failed publish last recreated the stream.
	streamChecked time.Time
	subs          sync.WaitGroup
	// stalled are the subscriptions, by topic, that are not consuming now
	// (their durable recreated and Consume failing, or lost and not made
	// again): Healthy reports them, Stalled lists their topics.
	stalled map[string]error

	closeOnce sync.Once
	closeErr  error
}

// DurableName is the JetStream durable consumer (and queue group) of a
// handler's topic.
func DurableName(topic string) string {
	rest := strings.TrimPrefix(topic, bus.TopicPrefix)
	if handler, role, ok := strings.Cut(rest, "."); ok {
		// A role's topic (bus.RoleTopic): a durable name has no dots.
		// "inlet_-ROLE-HANDLER" is no handler's (a handler name starts
		// with a letter or digit) and no other role's (role names have
		// no '-').
		return "inlet_-" + role + "-" + handler
	}
	return "inlet_" + rest
}

// New connects (retrying in the background while the server is away),
// ensures the stream, and returns the transport.
func New(ctx context.Context, cfg Config) (*NATS, error) {
	if cfg.URL == "" {
		return nil, errors.New("bus.url: required for bus.kind nats")
	}
	if cfg.Name == "" {
		cfg.Name = "inlet"
	}
	if cfg.AckWait <= 0 {
		cfg.AckWait = 30 * time.Second
	}
	if cfg.MaxAge <= 0 {
		cfg.MaxAge = 24 * time.Hour
	}
	adopt := cfg.Replicas <= 0 && cfg.Storage == ""
	if cfg.Replicas <= 0 {
		cfg.Replicas = 1
	}
	switch cfg.Storage {
	case "":
		cfg.Storage = "file"
	case "file", "memory":
	default:
		return nil, fmt.Errorf("bus.storage: %q is not file or memory", cfg.Storage)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	log = log.With(slog.String("component", "bus"))
	// Why the server cannot be reached while the first connection keeps
	// being tried (RetryOnFailedConnect reports nothing of it itself).
	var connectErr atomic.Pointer[error]
	conn, err := nats.Connect(cfg.URL,
		nats.ReconnectErrHandler(func(c *nats.Conn, err error) {
			if err == nil {
				return
			}
			if connectErr.Swap(&err) == nil {
				log.Warn("NATS not reachable; retrying", slog.String("url", redactURL(cfg.URL)), slog.String("error", errString(err)))
			}
		}),
		// Connected (at last, or again): the next outage's first failed
		// try is logged, and no stale reason is reported.
		nats.ConnectHandler(func(*nats.Conn) { connectErr.Store(nil) }),
		nats.Name(cfg.Name),
		nats.RetryOnFailedConnect(true),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(500*time.Millisecond),
		nats.ReconnectJitter(250*time.Millisecond, time.Second),
		nats.DisconnectErrHandler(func(c *nats.Conn, err error) {
			if c.IsClosed() {
				return // our own Close, at shutdown: nothing is lost
			}
			log.Warn("NATS disconnected; publishing fails and leases cover the gap until it is back", slog.String("error", errString(err)))
		}),
		nats.ReconnectHandler(func(c *nats.Conn) {
			connectErr.Store(nil)
			log.Info("NATS reconnected", slog.String("server", c.ConnectedUrlRedacted()))
		}),
	)
	if err != nil {
		return nil, fmt.Errorf("connect to NATS at %s: %w", redactURL(cfg.URL), err)
	}
	// An acknowledgement that never comes (a stream leader without quorum,
	// a server that took the message and stalled) expires: its future would
	// otherwise stay among the pending ones until a reconnect, and past
	// 4,000 of them every publish fails, JetStream answering again or not.
	js2, err := jetstream.New(conn, jetstream.WithPublishAsyncTimeout(publishTimeout))
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("JetStream: %w", err)
	}
	want := streamConfig(cfg)
	if adopt {
		// Made by this process, the stream has the defaults, not an
		// operator's settings: marked so, the streamer replaces it if its
		// storage differs (ensureStream).
		want.Metadata = map[string]string{defaultsKey: "true"}
	}
	stream, err := ensureStream(ctx, js2, cfg.URL, want, adopt, log)
	if err != nil {
		connected := conn.IsConnected()
		conn.Close()
		if !connected {
			why := "no answer"
			if e := connectErr.Load(); e != nil {
				why = errString(*e)
			}
			return nil, fmt.Errorf("connect to NATS at %s: not reached (%s) before the start gave up", redactURL(cfg.URL), why)
		}
		return nil, err
	}
	wlog := watermillLogger(log)
	js := wmnats.JetStreamConfig{
		AutoProvision: false, // ensureStream made the one stream all topics share
		// No server-side dedupe by message id: consumers fence duplicates in
		// Postgres (one take per attempt), and ids are not unique across topics.
		TrackMsgId: false,
	}
	subjects := func(_, topic string) *wmnats.SubjectDetail {
		return &wmnats.SubjectDetail{Primary: topic, QueueGroup: DurableName(topic)}
	}
	pub, err := wmnats.NewPublisherWithNatsConn(conn, wmnats.PublisherPublishConfig{
		Marshaler: &wmnats.NATSMarshaler{}, SubjectCalculator: subjects, JetStream: js,
	}, wlog)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("NATS publisher: %w", err)
	}
	return &NATS{conn: conn, js: js2, cfg: cfg, adopt: adopt, stream: stream, ackWait: cfg.AckWait, pub: pub, log: log, closing: make(chan struct{})}, nil
}

// defaultsKey marks, in INLET_JOBS' metadata, a stream made by a process
// without stream settings of its own (an SDK consumer started before the
// streamer on a fresh NATS): it has the defaults, not the operator's
// bus settings, and a process with settings of its own (the streamer)
// replaces it when its storage differs, which JetStream cannot change in
// place. Updated by such a process, the stream loses the mark.
const defaultsKey = "inlet.defaults"

// ensureTries bounds ensureStream's rounds of looking the stream up and
// making it, when another process makes, replaces or changes it meanwhile.
const ensureTries = 5

// streamConfig is INLET_JOBS with cfg's settings.
func streamConfig(cfg Config) jetstream.StreamConfig {
	storage := jetstream.FileStorage
	if cfg.Storage == "memory" {
		storage = jetstream.MemoryStorage
	}
	return jetstream.StreamConfig{
		Name:        StreamName,
		Description: "Inlet job references (ids only); Postgres is the source of truth",
		Subjects:    []string{bus.TopicPrefix + ">"},
		Retention:   jetstream.WorkQueuePolicy,
		MaxAge:      cfg.MaxAge,
		Storage:     storage,
		Replicas:    cfg.Replicas,
	}
}

// adopted is INLET_JOBS as a process in adopt mode makes it again once it is
// lost: with the settings (and the defaults mark) of the stream it found.
func adopted(found jetstream.StreamConfig) jetstream.StreamConfig {
	c := streamConfig(Config{MaxAge: found.MaxAge, Replicas: max(found.Replicas, 1)})
	c.Storage = found.Storage
	if found.Metadata[defaultsKey] != "" {
		c.Metadata = map[string]string{defaultsKey: "true"}
	}
	return c
}

// ensureStream makes INLET_JOBS as want has it and returns the settings to
// make it with when it is lost. In adopt mode (a process without settings
// of its own) an existing stream stays as it is (the streamer's: its
// replicas, storage and max age), and its settings are returned; else an
// existing stream is updated to want, and one marked defaultsKey whose
// storage differs is deleted and made again. A stream of another storage
// that is not marked is an error: JetStream cannot change it in place.
func ensureStream(ctx context.Context, js jetstream.JetStream, url string, want jetstream.StreamConfig, adopt bool, log *slog.Logger) (jetstream.StreamConfig, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for try := 1; ; try++ {
		s, err := js.Stream(ctx, StreamName)
		switch {
		case err == nil:
			have := s.CachedInfo().Config
			if adopt {
				return adopted(have), nil
			}
			if have.Storage != want.Storage {
				if have.Metadata[defaultsKey] == "" {
					return want, fmt.Errorf("JetStream stream %s at %s has %s storage, not bus.storage %s, and JetStream cannot change a stream's storage: "+
						"stop every service, delete the stream (nats stream rm %s) and start them again",
						StreamName, redactURL(url), storageName(have.Storage), storageName(want.Storage), StreamName)
				}
				log.Warn("JetStream stream made with the defaults by a service without bus settings: replacing it with this one's storage; lease expiry republishes the references lost",
					slog.String("stream", StreamName), slog.String("storage", storageName(have.Storage)), slog.String("bus.storage", storageName(want.Storage)))
				if err := js.DeleteStream(ctx, StreamName); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
					return want, fmt.Errorf("delete JetStream stream %s at %s (%s storage, made with the defaults) to make it with %s storage: %w",
						StreamName, redactURL(url), storageName(have.Storage), storageName(want.Storage), err)
				}
			}
		case !errors.Is(err, jetstream.ErrStreamNotFound):
			return want, fmt.Errorf("look up JetStream stream %s at %s%s: %w", StreamName, redactURL(url), jetStreamHint(err), err)
		}
		if adopt {
			// Create, not update: a stream another process made meanwhile
			// keeps its settings (the next round adopts them).
			_, err = js.CreateStream(ctx, want)
		} else {
			_, err = js.CreateOrUpdateStream(ctx, want)
		}
		if err == nil {
			return want, nil
		}
		// The server refused (a stream of other settings made, replaced or
		// changed meanwhile by another process): look again.
		var api jetstream.JetStreamError
		if try < ensureTries && errors.As(err, &api) && api.APIError() != nil && ctx.Err() == nil {
			continue
		}
		return want, fmt.Errorf("create or update JetStream stream %s at %s (%s storage, %d replicas)%s: %w",
			StreamName, redactURL(url), storageName(want.Storage), want.Replicas, jetStreamHint(err), err)
	}
}

// jetStreamHint is the hint for an error that says JetStream is not there.
func jetStreamHint(err error) string {
	if errors.Is(err, jetstream.ErrJetStreamNotEnabled) || errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount) ||
		errors.Is(err, nats.ErrNoResponders) {
		return " (is JetStream enabled, nats-server -js?)"
	}
	return ""
}

// storageName is bus.storage's word for st.
func storageName(st jetstream.StorageType) string {
	if st == jetstream.MemoryStorage {
		return "memory"
	}
	return "file"
}

// ensureStream makes the stream again if it is lost (ensureStream), and
// in adopt mode remembers the settings of the stream it finds.
func (n *NATS) ensureStream(ctx context.Context) error {
	n.mu.Lock()
	want := n.stream
	n.mu.Unlock()
	got, err := ensureStream(ctx, n.js, n.cfg.URL, want, n.adopt, n.log)
	if err != nil {
		return err
	}
	n.mu.Lock()
	n.stream = got
	n.mu.Unlock()
	return nil
}

// ownerGrace is how long a process in adopt mode leaves a lost stream made
// with the defaults to a process with settings of its own (leaveToOwner).
const ownerGrace = time.Second

// leaveToOwner reports whether a subscription's check leaves the missing
// stream, for now, to a process with settings of its own: in adopt mode,
// while the stream this process knows was made with the defaults, for
// ownerGrace after a check first found it missing. The streamer replaces
// such a stream by deleting it and making it again; a consumer that made it
// again in between, as its durable's loss makes it check at once, would
// fail the streamer's start.
func (n *NATS) leaveToOwner() bool {
	if !n.adopt {
		return false
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.stream.Metadata[defaultsKey] == "" {
		return false
	}
	if n.streamLost.IsZero() {
		n.streamLost = time.Now()
	}
	return time.Since(n.streamLost) < ownerGrace
}

// learnStream, in adopt mode, remembers the settings of the stream as it
// is now. Called once a durable is made: the stream a durable is made on
// may not be the one ensureStream found or made (the streamer replaced it
// meanwhile), and one replaced later deletes the durable, whose check then
// calls learnStream again. A failed lookup keeps what was known.
func (n *NATS) learnStream(ctx context.Context) {
	if !n.adopt {
		return
	}
	s, err := n.js.Stream(ctx, StreamName)
	if err != nil {
		n.log.Debug("look up JetStream stream's settings failed; keeping those known", slog.String("stream", StreamName), slog.String("error", err.Error()))
		return
	}
	n.mu.Lock()
	n.stream = adopted(s.CachedInfo().Config)
	n.mu.Unlock()
}

// streamStorage is the storage this process makes the stream with.
func (n *NATS) streamStorage() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return storageName(n.stream.Storage)
}

// publishTimeout bounds waiting for JetStream to store one Publish's
// messages.
const publishTimeout = 10 * time.Second

// Publish implements message.Publisher. It sends every message before
// awaiting any acknowledgement (JetStream's asynchronous publish: one round
// trip for a claim batch instead of one per reference) and returns once the
// stream has stored all of them, or with the first failure — then the
// streamer releases the batch's leases, and a reference that did get stored
// is fenced by its take. A message over the server's max_payload is split
// or refused before anything is sent (fitMaxPayload).
func (n *NATS) Publish(topic string, msgs ...*message.Message) error {
	return n.PublishContext(context.Background(), topic, msgs...)
}

// PublishContext is Publish, giving up when ctx ends (the streamer's claim
// round, which Stop waits for, has a deadline).
func (n *NATS) PublishContext(ctx context.Context, topic string, msgs ...*message.Message) error {
	if !n.conn.IsConnected() {
		return fmt.Errorf("publish to %s: NATS is not connected", topic)
	}
	// Every message is encoded, and split to fit the server's max_payload,
	// before any is sent: a publish that fails for size sends nothing, so
	// the leases the streamer gives back are of references not in the
	// stream.
	limit := n.conn.MaxPayload()
	nms := make([]*nats.Msg, 0, len(msgs))
	for _, msg := range msgs {
		parts, err := fitMaxPayload(topic, msg, limit)
		if err != nil {
			return fmt.Errorf("publish to %s: %w", topic, err)
		}
		if len(parts) > 1 {
			n.log.Debug("bus message over the server's max_payload split", slog.String("topic", topic),
				slog.String("message", msg.UUID), slog.Int("parts", len(parts)), slog.Int64("max_payload", limit))
		}
		nms = append(nms, parts...)
	}
	futures := make([]jetstream.PubAckFuture, 0, len(nms))
	for _, nm := range nms {
		if err := ctx.Err(); err != nil {
			// Nothing more is sent once ctx ends, so that a failure the
			// caller gives leases back for is not a reference in the stream.
			// (Those sent already may be stored: fenced like any duplicate.)
			return fmt.Errorf("publish to %s: %d of %d messages not sent: %w", topic, len(nms)-len(futures), len(nms), context.Cause(ctx))
		}
		f, err := n.js.PublishMsgAsync(nm)
		if err != nil {
			return fmt.Errorf("publish to %s: %w", topic, err)
		}
		futures = append(futures, f)
	}
	timeout := time.NewTimer(publishTimeout)
	defer timeout.Stop()
	for _, f := range futures {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			n.streamMissing(err)
			return fmt.Errorf("publish to %s: %w", topic, err)
		case <-timeout.C:
			return fmt.Errorf("publish to %s: JetStream acknowledged no more of %d messages within %s", topic, len(nms), publishTimeout)
		case <-ctx.Done():
			return fmt.Errorf("publish to %s: JetStream had not acknowledged all %d messages: %w", topic, len(nms), context.Cause(ctx))
		}
	}
	return nil
}

// fitMaxPayload encodes msg for topic as one NATS message, or as several
// when it is over limit (the server's max_payload; 0 when not known yet): a
// message of several job references (bus.NewBatchMessage, up to the
// streamer's refs_per_message of up to ~2 KB each) is split in halves until
// each part fits, every part a batch message of its own with msg's metadata
// (trace context) and its own id (NewBatchMessage's: first job, lease and
// count, so distinct and the same at each try). Sent as it was, the server
// refuses it, and the streamer would claim the same jobs into the same
// message again: they would never be delivered. One reference over limit,
// or a message that is no reference, is an error wrapping
// nats.ErrMaxPayload: no try can send it over this server.
func fitMaxPayload(topic string, msg *message.Message, limit int64) ([]*nats.Msg, error) {
	nm, err := marshaler.Marshal(topic, msg)
	if err != nil {
		return nil, fmt.Errorf("encode message %s: %w", msg.UUID, err)
	}
	size := payloadSize(nm)
	if limit <= 0 || size <= limit {
		return []*nats.Msg{nm}, nil
	}
	// ParseRefs' error is not wrapped: it may quote the payload.
	refs, perr := bus.ParseRefs(msg)
	switch {
	case perr != nil:
		return nil, fmt.Errorf("message %s is %d bytes, over the server's max_payload of %d bytes, and is no job reference to split: %w",
			msg.UUID, size, limit, nats.ErrMaxPayload)
	case len(refs) == 1:
		return nil, tooLarge(refs[0], size, limit)
	}
	return splitRefs(topic, msg.Metadata, refs, limit)
}

// splitRefs encodes refs as batch messages with metadata md, halving them
// until each fits limit.
func splitRefs(topic string, md message.Metadata, refs []bus.Ref, limit int64) ([]*nats.Msg, error) {
	half := len(refs) / 2
	var out []*nats.Msg
	for _, part := range [][]bus.Ref{refs[:half], refs[half:]} {
		pm, err := bus.NewBatchMessage(part)
		if err != nil {
			return nil, err
		}
		maps.Copy(pm.Metadata, md)
		nm, err := marshaler.Marshal(topic, pm)
		if err != nil {
			return nil, fmt.Errorf("encode message %s: %w", pm.UUID, err)
		}
		size := payloadSize(nm)
		switch {
		case size <= limit:
			out = append(out, nm)
		case len(part) == 1:
			return nil, tooLarge(part[0], size, limit)
		default:
			more, err := splitRefs(topic, md, part, limit)
			if err != nil {
				return nil, err
			}
			out = append(out, more...)
		}
	}
	return out, nil
}

// tooLarge is the error for a reference that alone is over max_payload
// (its content stays out of it).
func tooLarge(r bus.Ref, size, limit int64) error {
	return fmt.Errorf("the reference to job %d (handler %q) is %d bytes, over the server's max_payload of %d bytes: it cannot be delivered over this server: %w",
		r.JobID, r.Handler, size, limit, nats.ErrMaxPayload)
}

// payloadSize is what the server compares with max_payload: the data and
// the encoded headers (the watermill UUID and the metadata), measured as
// nats.go encodes them; the subject and the reply inbox do not count.
func payloadSize(nm *nats.Msg) int64 {
	return int64(nm.Size() - len(nm.Subject) - len(nm.Reply))
}

// streamMissing recreates the stream when a publish found none (a NATS
// restart with memory storage, or a delete), at most once a second; the
// failed publish is released and claimed again by the streamer.
func (n *NATS) streamMissing(err error) {
	if !errors.Is(err, jetstream.ErrNoStreamResponse) && !errors.Is(err, nats.ErrNoResponders) && !errors.Is(err, jetstream.ErrStreamNotFound) {
		return
	}
	n.mu.Lock()
	if time.Since(n.streamChecked) < time.Second {
		n.mu.Unlock()
		return
	}
	n.streamChecked = time.Now()
	n.mu.Unlock()
	n.log.Warn("JetStream has no stream for the references: recreating it", slog.String("stream", StreamName), slog.String("storage", n.streamStorage()))
	if err := n.ensureStream(context.Background()); err != nil {
		n.log.Warn("recreate JetStream stream failed; the next publish tries again", slog.String("error", err.Error()))
	}
}

// marshaler encodes messages as watermill-nats does (the UUID and metadata
// as NATS headers), so its subscriber side reads them unchanged.
var marshaler = &wmnats.NATSMarshaler{}

// Subscribe implements message.Subscriber with a pull consumer on the
// topic's durable consumer, which Inlet creates (or updates) itself: replicas
// subscribing to the same topic pull from the same durable and so share its
// references. The returned channel is closed after ctx is done or Close, once
// no delivery is in flight.
//
// (watermill-nats' own subscriber closes its output channel while a delivery
// may still be sending on it, a data race the race detector reports; this
// one holds a lock across each delivery instead.)
func (n *NATS) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	n.mu.Lock()
	select {
	case <-n.closing:
		n.mu.Unlock()
		return nil, errors.New("subscribe " + topic + ": NATS transport closed")
	default:
	}
	n.subs.Add(1)
	n.mu.Unlock()

	name := DurableName(topic)
	consumerConfig := n.consumerConfig(topic)
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	cons, err := n.js.CreateOrUpdateConsumer(cctx, StreamName, consumerConfig)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		// Lost since New (a NATS restart with memory storage, or the
		// streamer replacing a stream made with the defaults): make it
		// again, as a subscription's check would.
		if err = n.ensureStream(cctx); err == nil {
			cons, err = n.js.CreateOrUpdateConsumer(cctx, StreamName, consumerConfig)
		}
	}
	if err == nil {
		n.learnStream(cctx)
	}
	cancel()
	if err != nil {
		n.subs.Done()
		return nil, fmt.Errorf("create or update JetStream consumer %s: %w", name, err)
	}

	out := make(chan *message.Message)
	stop := make(chan struct{})
	var sending sync.RWMutex // held (read) by each delivery, (write) by the closer
	closed := false
	unmarshal := &wmnats.NATSMarshaler{}
	deliver := func(jm jetstream.Msg) {
		msg, err := unmarshal.Unmarshal(&nats.Msg{Subject: jm.Subject(), Data: jm.Data(), Header: jm.Headers()})
		if err != nil {
			n.log.Warn("drop undecodable bus message", slog.String("topic", topic), slog.String("error", err.Error()))
			_ = jm.Term()
			return
		}
		mctx, mcancel := context.WithCancel(ctx)
		defer mcancel()
		msg.SetContext(mctx)
		sending.RLock()
		if closed {
			sending.RUnlock()
			_ = jm.Nak()
			return
		}
		select {
		case out <- msg:
			sending.RUnlock()
		case <-stop:
			sending.RUnlock()
			_ = jm.Nak()
			return
		}
		select {
		case <-msg.Acked():
			_ = jm.Ack()
		case <-msg.Nacked():
			_ = jm.Nak()
		case <-stop:
			// The receiver has the message and decides: the consumer
			// service acknowledges it once an attempt has a slot, and nacks
			// it if it stops first. Wait a moment for that decision rather
			// than nack it here: a nack of a message whose attempt just
			// started hands it to another replica as well, which runs the
			// same attempt a second time.
			wait := time.NewTimer(stopDecisionWait)
			select {
			case <-msg.Acked():
				_ = jm.Ack()
			case <-msg.Nacked():
				_ = jm.Nak()
			case <-wait.C:
				_ = jm.Nak()
			}
			wait.Stop()
		}
	}
	// Any consume error (a missed heartbeat, a deleted or unknown
	// consumer) asks the loop below to check that the stream and the
	// durable still exist: a NATS restart with memory storage, or an
	// operator's delete, loses both.
	check := make(chan struct{}, 1)
	onErr := jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
		select {
		case check <- struct{}{}:
		default:
		}
	})
	cc, err := cons.Consume(deliver, jetstream.PullMaxMessages(64), onErr)
	if err != nil {
		n.subs.Done()
		return nil, fmt.Errorf("consume JetStream consumer %s: %w", name, err)
	}
	go func() {
		defer n.subs.Done()
		// lctx ends the checks' lookups when the transport closes, not
		// only with ctx: Close waits for this goroutine, and a lookup on a
		// connection that is down would wait out its own timeout.
		lctx, lcancel := context.WithCancel(ctx)
		defer lcancel()
		go func() {
			select {
			case <-n.closing:
				lcancel()
			case <-lctx.Done():
			}
		}()
		tick := time.NewTicker(consumerCheckInterval)
		defer tick.Stop()
		// stopped is closed when the library ends cc by itself (the durable
		// deleted, a 400 from the server): nil once seen, until a new cc.
		stopped := cc.Closed()
		for done := false; !done; {
			select {
			case <-ctx.Done():
				done = true
			case <-n.closing:
				done = true
			case <-check:
			case <-stopped:
				stopped = nil
			case <-tick.C:
			}
			if done || lctx.Err() != nil { // or a check woke up as the transport closed
				break
			}
			restored := n.restoreConsumer(lctx, consumerConfig)
			if restored == nil && isClosed(cc) {
				// The durable is there (another replica recreated it, or
				// it was never lost) but this subscription no longer
				// consumes it: consume it again.
				restored = n.existingConsumer(lctx, topic)
			}
			if restored != nil {
				cc.Stop()
				cc = n.resume(lctx, topic, func() (jetstream.ConsumeContext, error) {
					return restored.Consume(deliver, jetstream.PullMaxMessages(64), onErr)
				})
				done = cc == nil
				if cc != nil {
					stopped = cc.Closed()
				}
			}
		}
		close(stop)
		if cc != nil {
			// Drain, not Stop: the messages pulled into the client's
			// buffer (up to 64, each of up to refs_per_message
			// references) still reach deliver, which nacks them now that
			// stop is closed, so another replica gets them at once; Stop
			// dropped them, and they waited out AckWait (review helper-85).
			cc.Drain()
			select {
			case <-cc.Closed():
			case <-time.After(drainWait):
				cc.Stop()
			}
		}
		sending.Lock()
		closed = true
		close(out)
		sending.Unlock()
	}()
	return out, nil
}

// drainWait bounds how long a stopping subscription waits for its buffered
// messages to be nacked.
const drainWait = 5 * time.Second

// consumerConfig is the durable consumer of topic that Subscribe creates.
func (n *NATS) consumerConfig(topic string) jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       DurableName(topic),
		Description:   "Inlet consumers of " + topic,
		FilterSubject: topic,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       n.ackWait,
		MaxAckPending: 1000,
	}
}

// stopDecisionWait is how long a subscription that stops waits for its
// receiver to acknowledge or nack a message it handed out before it nacks
// the message itself.
const stopDecisionWait = 2 * time.Second

// consumerCheckInterval is how often a subscription checks that its stream
// and durable consumer still exist when nothing reported an error.
const consumerCheckInterval = 5 * time.Second

// Consume on a recreated durable is retried after resumeBackoffMin, doubling
// up to resumeBackoffMax, until it succeeds or the subscription ends.
const (
	resumeBackoffMin = 100 * time.Millisecond
	resumeBackoffMax = 5 * time.Second
)

// resumeFault runs before each Consume of a recreated durable; an error it
// returns fails that Consume (a test's way to make resuming fail).
var resumeFault = func() error { return nil }

// resume consumes a recreated durable (start), retrying with backoff until it
// succeeds: the old consume context is stopped, so giving up would leave the
// subscription open and delivering nothing. Meanwhile Healthy and Stalled
// report it. It returns nil when ctx is done or the transport closes first.
func (n *NATS) resume(ctx context.Context, topic string, start func() (jetstream.ConsumeContext, error)) jetstream.ConsumeContext {
	name := DurableName(topic)
	defer n.setStalled(topic, nil)
	wait := resumeBackoffMin
	for try := 1; ; try++ {
		err := resumeFault()
		var cc jetstream.ConsumeContext
		if err == nil {
			cc, err = start()
		}
		if err == nil {
			if try > 1 {
				n.log.Info("JetStream consumer resumed", slog.String("consumer", name), slog.Int("attempt", try))
			}
			return cc
		}
		err = fmt.Errorf("consume recreated JetStream consumer %s: %w", name, err)
		n.setStalled(topic, err)
		n.log.Warn("resume JetStream consumer failed; retrying", slog.String("consumer", name),
			slog.Int("attempt", try), slog.Duration("retry_in", wait), slog.String("error", err.Error()))
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-n.closing:
			t.Stop()
			return nil
		case <-t.C:
		}
		wait = min(2*wait, resumeBackoffMax)
	}
}

// setStalled records that the subscription of topic is not consuming (err)
// or is again (nil).
func (n *NATS) setStalled(topic string, err error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if err == nil {
		delete(n.stalled, topic)
		return
	}
	if n.stalled == nil {
		n.stalled = map[string]error{}
	}
	n.stalled[topic] = err
}

// Healthy reports an error while the connection to NATS is down
// (ConnectionHealthy) and while a subscription is not consuming (Stalled):
// its durable was recreated and consuming it keeps failing, or it was lost
// and cannot be made again (a stream or account consumer limit, credentials
// that may consume but not create consumers), so its handler gets no
// references until a retry succeeds.
func (n *NATS) Healthy() error {
	var errs []error
	if err := n.ConnectionHealthy(); err != nil {
		errs = append(errs, err)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, topic := range slices.Sorted(maps.Keys(n.stalled)) {
		errs = append(errs, n.stalled[topic])
	}
	return errors.Join(errs...)
}

// ConnectionHealthy reports an error while the connection to NATS is down
// (the client is reconnecting: nothing is published or delivered to any
// subscription meanwhile).
func (n *NATS) ConnectionHealthy() error {
	if st := n.conn.Status(); st != nats.CONNECTED {
		return fmt.Errorf("nats: not connected to %s (%s)", redactURL(n.cfg.URL), st)
	}
	return nil
}

// Stalled returns the topics, sorted, whose subscription is not consuming
// now (what Healthy reports besides the connection): their references are
// not delivered, while the other subscriptions' are. A consumer service
// leaves their handlers out of its liveness until they consume again.
func (n *NATS) Stalled() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Sorted(maps.Keys(n.stalled))
}

// Ping asks JetStream for this account's information: nil when it answers
// within ctx. A streamer whose last publish was refused and that has had
// nothing to publish since asks it, so its readiness follows the bus's
// recovery.
func (n *NATS) Ping(ctx context.Context) error {
	if _, err := n.js.AccountInfo(ctx); err != nil {
		return fmt.Errorf("nats: JetStream at %s does not answer: %w", redactURL(n.cfg.URL), err)
	}
	return nil
}

// restoreConsumer returns nil while the durable exists (or NATS cannot be
// asked), else recreates the stream and the durable and returns the new
// consumer.
func (n *NATS) restoreConsumer(ctx context.Context, cfg jetstream.ConsumerConfig) jetstream.Consumer {
	beforeConsumerCheck()
	if !n.conn.IsConnected() {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err := n.js.Consumer(ctx, StreamName, cfg.Durable)
	if !errors.Is(err, jetstream.ErrStreamNotFound) {
		n.mu.Lock()
		n.streamLost = time.Time{}
		n.mu.Unlock()
	} else if n.leaveToOwner() {
		return nil
	}
	if !errors.Is(err, jetstream.ErrConsumerNotFound) && !errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil
	}
	n.log.Warn("JetStream lost the stream or this handler's durable consumer (a NATS restart with memory storage, or a delete): recreating; lease expiry republishes the references lost",
		slog.String("stream", StreamName), slog.String("consumer", cfg.Durable), slog.String("storage", n.streamStorage()))
	if err := n.ensureStream(ctx); err != nil {
		n.log.Warn("recreate JetStream stream failed; retrying", slog.String("error", err.Error()))
		return nil
	}
	cons, err := n.js.CreateOrUpdateConsumer(ctx, StreamName, cfg)
	if err != nil {
		n.log.Warn("recreate JetStream consumer failed; retrying", slog.String("consumer", cfg.Durable), slog.String("error", err.Error()))
		return nil
	}
	n.learnStream(ctx)
	return cons
}

// existingConsumer looks the durable name up for a subscription whose
// consume context the library ended (nil when it cannot: NATS is away, or the
// durable is gone, which restoreConsumer handles on the next check). Until
// it is consumed again, Healthy and Stalled report the subscription of
// topic.
func (n *NATS) existingConsumer(ctx context.Context, topic string) jetstream.Consumer {
	name := DurableName(topic)
	err := consumerCheckFault()
	if err == nil && !n.conn.IsConnected() {
		err = errors.New("NATS is not connected")
	}
	var cons jetstream.Consumer
	if err == nil {
		lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		cons, err = n.js.Consumer(lctx, StreamName, name)
		cancel()
	}
	if err != nil {
		err = fmt.Errorf("JetStream consumer %s stopped consuming and cannot be looked up: %w", name, err)
		n.setStalled(topic, err)
		n.log.Warn("JetStream stopped consuming a durable; retrying", slog.String("consumer", name), slog.String("error", err.Error()))
		return nil
	}
	n.log.Warn("JetStream stopped consuming a durable that exists (deleted and recreated by another replica, or refused a pull): consuming it again",
		slog.String("consumer", name))
	return cons
}

// beforeConsumerCheck runs as each check of a subscription's stream and
// durable begins (a test's way to act before it looks).
var beforeConsumerCheck = func() {}

// consumerCheckFault runs before existingConsumer's lookup; an error it
// returns fails the lookup (a test's way to keep NATS unreachable).
var consumerCheckFault = func() error { return nil }

// isClosed reports whether the library has ended cc.
func isClosed(cc jetstream.ConsumeContext) bool {
	select {
	case <-cc.Closed():
		return true
	default:
		return false
	}
}

// Close ends every subscription and closes the connection.
func (n *NATS) Close() error {
	n.closeOnce.Do(func() {
		n.mu.Lock()
		close(n.closing)
		n.mu.Unlock()
		n.subs.Wait()
		n.closeErr = n.pub.Close()
		n.conn.Close()
	})
	return n.closeErr
}

func errString(err error) string {
	if err == nil {
		return "closed"
	}
	return err.Error()
}

// redactURL drops credentials from a NATS URL for messages.
func redactURL(u string) string {
	if at := strings.LastIndex(u, "@"); at >= 0 {
		if scheme := strings.Index(u, "://"); scheme >= 0 && scheme < at {
			return u[:scheme+3] + "***" + u[at:]
		}
	}
	return u
}

func watermillLogger(logger *slog.Logger) watermill.LoggerAdapter {
	if logger == nil {
		logger = slog.Default()
	}
	// Watermill's info lines are per subscription; keep them at debug.
	return watermill.NewSlogLoggerWithLevelMapping(logger.With(slog.String("component", "bus")),
		map[slog.Level]slog.Level{slog.LevelInfo: slog.LevelDebug})
}
