// Package bus is the wiring between the streamer and consumers: the reference
// message the streamer publishes for a leased job, the topic of each handler,
// and the in-process transport for a streamer and consumers that share one
// process (package natsbus is the NATS JetStream transport across
// processes). On both, the subscribers of a topic (replicas of one handler's
// consumer, in one process or several) share its jobs: each reference goes to
// one of them. Only references travel: never a body, a header or a secret.
// Postgres stays the source of truth; a lost message costs latency (the lease
// expires and the job is published again), never data.
//
// It is part of the consumer SDK's module so that the streamer (in Inlet's
// server module) and consumers share one definition of the message.
package bus

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strconv"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
)

// Ref is the whole content of a bus message: which job to run and what it is
// about. The consumer fetches everything else from Postgres by JobID.
type Ref struct {
	JobID     int64  `json:"job_id"`
	EventID   int64  `json:"event_id"`
	Handler   string `json:"handler"`
	Provider  string `json:"provider"`
	EventType string `json:"event_type"`
	// Attempt is the attempt number the lease was taken for; outcomes are
	// fenced on it, so a stale message cannot finish a newer attempt.
	Attempt int `json:"attempt"`
	// EventReceivedAt is the job's partition key (its event's received_at),
	// so the consumer's statements touch one partition of jobs and events
	// instead of probing each. Zero in references from before it was sent.
	EventReceivedAt time.Time `json:"event_received_at,omitzero"`
	// LeasedAt is when the streamer leased this attempt (jobs.attempted_at):
	// with Attempt, the lease token. The consumer reads the event fenced on
	// it and every outcome is fenced on it, since attempt numbers repeat
	// after a replay. Zero in references from before it was sent: the
	// consumer then reads the token from the job row.
	LeasedAt time.Time `json:"leased_at,omitzero"`
	// LeaseExpiresAt is when the lease runs out unless extended, so a
	// consumer whose reference waited in the bus extends it before the
	// handler starts.
	LeaseExpiresAt time.Time `json:"lease_expires_at,omitzero"`
}

// TopicPrefix starts every handler topic.
const TopicPrefix = "inlet.jobs."

var handlerName = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)

// ValidHandlerName reports whether name can be a handler (and so a topic) name:
// 1-63 lower-case letters, digits, '-' and '_'.
func ValidHandlerName(name string) error {
	if !handlerName.MatchString(name) {
		return fmt.Errorf("handler name %q must be 1-63 lower-case letters, digits, '-' or '_'", name)
	}
	return nil
}

// Topic is the topic a handler's jobs are published on.
func Topic(handler string) string { return TopicPrefix + handler }

// NewMessage encodes r as a watermill message. The message UUID is the job id
// and attempt, so transports that dedupe by id drop only true repeats.
func NewMessage(r Ref) (*message.Message, error) {
	b, err := json.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("encode reference to job %d: %w", r.JobID, err)
	}
	msg := message.NewMessage(strconv.FormatInt(r.JobID, 10)+"-"+strconv.Itoa(r.Attempt), b)
	msg.Metadata.Set("handler", r.Handler)
	return msg, nil
}

// ParseMessage decodes a message published by NewMessage.
func ParseMessage(msg *message.Message) (Ref, error) {
	var r Ref
	if err := json.Unmarshal(msg.Payload, &r); err != nil {
		return Ref{}, fmt.Errorf("decode job reference %s: %w", msg.UUID, err)
	}
	if r.JobID <= 0 || r.Attempt <= 0 || r.Handler == "" {
		return Ref{}, errors.New("decode job reference " + msg.UUID + ": job_id, attempt and handler are required")
	}
	return r, nil
}

// PubSub is both halves of a transport.
type PubSub interface {
	message.Publisher
	message.Subscriber
}

// NewGoChannel returns the in-process transport (inlet dev, single-process
// use). Subscribers of one topic share its messages, each message going to one
// of them, as on NATS; a topic queues up to 256 messages, and Publish waits
// while its queue is full. Close it to end every subscription.
func NewGoChannel(logger *slog.Logger) PubSub {
	return newGoChannel(logger)
}
