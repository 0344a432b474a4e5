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
	"bytes"
	"cmp"
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
	// TraceParent is the W3C traceparent of the streamer's span for this
	// job, in a message of several references (NewBatchMessage); a message
	// of one carries it in its metadata instead. "" when not traced.
	TraceParent string `json:"traceparent,omitempty"`
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

// RoleTopic is the topic of a shared handler's jobs for one consumer role
// (role names are lower-case letters, digits and '_'; "" for the
// unrestricted roles, such as webhook_worker, spelled UnscopedRole): the
// streamer publishes there the jobs only that role may take, when the
// handler's consumers run as two roles or more, and that role's consumers
// read it beside Topic(handler).
func RoleTopic(handler, role string) string {
	return TopicPrefix + handler + "." + cmp.Or(role, UnscopedRole)
}

// UnscopedRole stands for the unrestricted roles in RoleTopic: a shared
// handler's jobs no scoped role covers go there, for the consumers that may
// take any job. No role is named "_" (consumer roles are
// webhook_consumer_NAME).
const UnscopedRole = "_"

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

// NewBatchMessage encodes refs, all of one handler, as one watermill
// message: a JSON array of references, each with its own TraceParent. One
// message per claim chunk instead of one per job is what makes the bus cheap
// per job (one JetStream publish, delivery and acknowledgement for many jobs)
// and keeps a chunk's jobs together on one replica, so its reads and
// completions batch. The UUID names the first job, its lease and the count.
// Consumers older than this message kind drop it as malformed (their leases
// then expire and are retried): see the streamer's RefsPerMessage.
func NewBatchMessage(refs []Ref) (*message.Message, error) {
	if len(refs) == 0 {
		return nil, errors.New("encode job references: none given")
	}
	b, err := json.Marshal(refs)
	if err != nil {
		return nil, fmt.Errorf("encode references to jobs %d and %d more: %w", refs[0].JobID, len(refs)-1, err)
	}
	first := refs[0]
	msg := message.NewMessage(strconv.FormatInt(first.JobID, 10)+"-"+strconv.Itoa(first.Attempt)+"-"+
		strconv.FormatInt(first.LeasedAt.UnixMicro(), 10)+"+"+strconv.Itoa(len(refs)), b)
	msg.Metadata.Set("handler", first.Handler)
	return msg, nil
}

// ParseMessage decodes a message published by NewMessage.
func ParseMessage(msg *message.Message) (Ref, error) {
	var r Ref
	if err := json.Unmarshal(msg.Payload, &r); err != nil {
		return Ref{}, fmt.Errorf("decode job reference %s: %w", msg.UUID, err)
	}
	if err := checkRef(r); err != nil {
		return Ref{}, fmt.Errorf("decode job reference %s: %w", msg.UUID, err)
	}
	return r, nil
}

// ParseRefs decodes a message published by NewMessage (one reference) or
// NewBatchMessage (several). A malformed reference makes the whole message
// malformed: none is returned.
func ParseRefs(msg *message.Message) ([]Ref, error) {
	payload := bytes.TrimLeft(msg.Payload, " \t\r\n")
	if len(payload) == 0 || payload[0] != '[' {
		r, err := ParseMessage(msg)
		if err != nil {
			return nil, err
		}
		return []Ref{r}, nil
	}
	var refs []Ref
	if err := json.Unmarshal(payload, &refs); err != nil {
		return nil, fmt.Errorf("decode job references %s: %w", msg.UUID, err)
	}
	if len(refs) == 0 {
		return nil, errors.New("decode job references " + msg.UUID + ": the list is empty")
	}
	for i, r := range refs {
		if err := checkRef(r); err != nil {
			return nil, fmt.Errorf("decode job references %s: reference %d: %w", msg.UUID, i, err)
		}
	}
	return refs, nil
}

func checkRef(r Ref) error {
	if r.JobID <= 0 || r.Attempt <= 0 || r.Handler == "" {
		return errors.New("job_id, attempt and handler are required")
	}
	return nil
}

// PubSub is both halves of a transport.
type PubSub interface {
	message.Publisher
	message.Subscriber
}

// NewGoChannel returns the in-process transport (inlet dev, single-process
// use). Subscribers of one topic share its messages, each message going to one
// of them, as on NATS; a topic queues up to 8,192 messages, and Publish
// never waits: into a full topic that someone reads it returns ErrFull (the
// streamer gives those leases back), so one handler's stalled consumer does
// not hold up the others' references. Close it to end every subscription.
func NewGoChannel(logger *slog.Logger) PubSub {
	return newGoChannel(logger)
}
