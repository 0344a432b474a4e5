package consumers

import (
	"context"
	"net/http"
	"strconv"
	"time"
)

// Event is what a handler receives: one attempt of one job, with the event it
// is about, fetched from Postgres.
type Event struct {
	// JobID identifies the (event, handler) job. It is stable across retries
	// and replays, so it is also the idempotency key (see IdempotencyKey).
	JobID int64
	// EventID is the webhook_ingress.events row.
	EventID int64
	// Handler is the name of the handler the job belongs to.
	Handler string
	// Provider is the configured source name the webhook arrived on.
	Provider string
	// Scheme is the signature scheme the source is verified with.
	Scheme string
	// ExternalID is the provider's own event id.
	ExternalID string
	// EventType is the provider's event type; it may be empty.
	EventType string
	// ReceivedAt is when ingress accepted the webhook.
	ReceivedAt time.Time
	// OccurredAt is when the provider says the event happened (Stripe's
	// created, Paddle's occurred_at, …); zero when it gives none (GitHub,
	// Twilio). Providers retry and reorder: order by it, not by arrival,
	// where order matters.
	OccurredAt time.Time
	// Headers are the request headers as received.
	Headers http.Header
	// Body holds the exact bytes the provider signed.
	Body []byte
	// Attempt is this attempt's number, 1-based.
	Attempt int
	// MaxAttempts is the job's attempt limit; the last attempt's failure
	// dead-letters the job.
	MaxAttempts int
}

// IdempotencyKey returns "inlet-job-<job id>": the same for every attempt of
// the job, different for every (event, handler).
func (e *Event) IdempotencyKey() string {
	return "inlet-job-" + strconv.FormatInt(e.JobID, 10)
}

// HandlerFunc handles one attempt. A nil error completes the job; an error
// fails the attempt (see [Permanent] and [WithClass]). ctx ends at the
// handler's Timeout or at a forced shutdown. A panic, and a return through
// runtime.Goexit (t.FailNow in a handler under test), fail the attempt with
// class panic; a typed nil (a nil *MyError returned as error) fails it as a
// handler error that says so.
type HandlerFunc func(ctx context.Context, e *Event) error
