package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	wmnats "github.com/ThreeDotsLabs/watermill-nats/v2/pkg/nats"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// StreamName is the JetStream stream every handler topic lives in. It is a
// work queue: a reference is removed once a consumer acknowledges it.
const StreamName = "INLET_JOBS"

// NATSConfig configures the JetStream transport.
type NATSConfig struct {
	// URL of the NATS server(s), comma-separated. Required.
	URL string
	// Name identifies the connection on the server (monitoring). Defaults to
	// "inlet".
	Name string
	// AckWait is how long JetStream waits for a consumer to acknowledge a
	// reference before redelivering it. Consumers acknowledge on receipt
	// (Postgres holds the lease), so this only covers a consumer that dies
	// between receiving and acknowledging. Defaults to 30s.
	AckWait time.Duration
	// MaxAge bounds how long an unconsumed reference stays in the stream
	// (the lease expiry republishes it anyway). Defaults to 24h.
	MaxAge time.Duration
	// Replicas of the stream in a NATS cluster. Defaults to 1.
	Replicas int
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// NATS is the JetStream transport: one connection, the INLET_JOBS stream
// (created or updated at start), and a durable consumer per handler whose
// replicas share the handler's references (a queue group), while different
// handlers each get their own.
type NATS struct {
	conn    *nats.Conn
	js      nats.JetStreamContext
	ackWait time.Duration
	pub     *wmnats.Publisher
	sub     *wmnats.Subscriber

	closeOnce sync.Once
	closeErr  error
}

// DurableName is the JetStream durable consumer (and queue group) of a
// handler's topic.
func DurableName(topic string) string {
	return "inlet_" + strings.TrimPrefix(topic, TopicPrefix)
}

// NewNATS connects (retrying in the background while the server is away),
// ensures the stream, and returns the transport.
func NewNATS(ctx context.Context, cfg NATSConfig) (*NATS, error) {
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
	if cfg.Replicas <= 0 {
		cfg.Replicas = 1
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	log = log.With(slog.String("component", "bus"))
	conn, err := nats.Connect(cfg.URL,
		nats.Name(cfg.Name),
		nats.RetryOnFailedConnect(true),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(500*time.Millisecond),
		nats.ReconnectJitter(250*time.Millisecond, time.Second),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			log.Warn("NATS disconnected; publishing fails and leases cover the gap until it is back", slog.String("error", errString(err)))
		}),
		nats.ReconnectHandler(func(c *nats.Conn) {
			log.Info("NATS reconnected", slog.String("server", c.ConnectedUrlRedacted()))
		}),
	)
	if err != nil {
		return nil, fmt.Errorf("connect to NATS at %s: %w", redactURL(cfg.URL), err)
	}
	if err := ensureStream(ctx, conn, cfg); err != nil {
		conn.Close()
		return nil, err
	}
	wlog := watermillLogger(log)
	js := wmnats.JetStreamConfig{
		AutoProvision: false, // ensureStream made the one stream all topics share
		// No server-side dedupe by message id: consumers fence duplicates in
		// Postgres (one take per attempt), and ids are not unique across topics.
		TrackMsgId: false,
		DurableCalculator: func(_, topic string) string {
			return DurableName(topic)
		},
		SubscribeOptions: []nats.SubOpt{
			nats.ManualAck(),
			nats.AckExplicit(),
			nats.AckWait(cfg.AckWait),
			nats.DeliverAll(),
		},
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
	sub, err := wmnats.NewSubscriberWithNatsConn(conn, wmnats.SubscriberSubscriptionConfig{
		Unmarshaler: &wmnats.NATSMarshaler{}, SubjectCalculator: subjects, JetStream: js,
		SubscribersCount: 1, AckWaitTimeout: cfg.AckWait, CloseTimeout: 5 * time.Second,
		SubscribeTimeout: 30 * time.Second,
	}, wlog)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("NATS subscriber: %w", err)
	}
	jsc, err := conn.JetStream()
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("JetStream: %w", err)
	}
	return &NATS{conn: conn, js: jsc, ackWait: cfg.AckWait, pub: pub, sub: sub}, nil
}

func ensureStream(ctx context.Context, conn *nats.Conn, cfg NATSConfig) error {
	js, err := jetstream.New(conn)
	if err != nil {
		return fmt.Errorf("JetStream: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_, err = js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:        StreamName,
		Description: "Inlet job references (ids only); Postgres is the source of truth",
		Subjects:    []string{TopicPrefix + ">"},
		Retention:   jetstream.WorkQueuePolicy,
		MaxAge:      cfg.MaxAge,
		Storage:     jetstream.FileStorage,
		Replicas:    cfg.Replicas,
	})
	if err != nil {
		return fmt.Errorf("create or update JetStream stream %s at %s (is JetStream enabled, nats-server -js?): %w", StreamName, redactURL(cfg.URL), err)
	}
	return nil
}

// Publish implements message.Publisher.
func (n *NATS) Publish(topic string, msgs ...*message.Message) error {
	if !n.conn.IsConnected() {
		return fmt.Errorf("publish to %s: NATS is not connected", topic)
	}
	return n.pub.Publish(topic, msgs...)
}

// Subscribe implements message.Subscriber. The topic's durable consumer is
// created here, not by the subscription: a consumer the client library
// creates is deleted when that subscription ends, which would cut off the
// other replicas sharing it.
func (n *NATS) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	if err := n.ensureConsumer(topic); err != nil {
		return nil, err
	}
	return n.sub.Subscribe(ctx, topic)
}

func (n *NATS) ensureConsumer(topic string) error {
	name := DurableName(topic)
	cfg := &nats.ConsumerConfig{
		Durable:        name,
		Description:    "Inlet consumers of " + topic,
		DeliverSubject: "_INLET.deliver." + name,
		DeliverGroup:   name,
		FilterSubject:  topic,
		DeliverPolicy:  nats.DeliverAllPolicy,
		AckPolicy:      nats.AckExplicitPolicy,
		AckWait:        n.ackWait,
		MaxAckPending:  1000,
	}
	if _, err := n.js.ConsumerInfo(StreamName, name); err == nil {
		if _, err := n.js.UpdateConsumer(StreamName, cfg); err != nil {
			return fmt.Errorf("update JetStream consumer %s: %w", name, err)
		}
		return nil
	}
	if _, err := n.js.AddConsumer(StreamName, cfg); err != nil && !errors.Is(err, nats.ErrConsumerNameAlreadyInUse) {
		if _, infoErr := n.js.ConsumerInfo(StreamName, name); infoErr == nil {
			return nil // another replica made it at the same moment
		}
		return fmt.Errorf("create JetStream consumer %s: %w", name, err)
	}
	return nil
}

// Close closes the subscriptions and the connection.
func (n *NATS) Close() error {
	n.closeOnce.Do(func() {
		n.closeErr = errors.Join(n.sub.Close(), n.pub.Close())
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
