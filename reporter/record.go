package reporter

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"time"

	"github.com/inlet-dev/inlet/consumers"
)

// Outcome is how an attempt ended: the values of
// webhook_ingress.job_attempts.outcome (a success kept on its job row is
// "completed").
type Outcome string

// The fixed list of outcomes. [Outcomes] returns it.
const (
	OutcomeCompleted    Outcome = "completed"     // the handler succeeded
	OutcomeFailed       Outcome = "failed"        // it failed and will be retried
	OutcomeDeadLetter   Outcome = "dead_letter"   // the last attempt failed, or the error was permanent
	OutcomeLeaseExpired Outcome = "lease_expired" // the consumer never reported; the reaper closed the attempt
	OutcomeReplayed     Outcome = "replayed"      // not an attempt: an operator re-queued the job
)

var outcomes = []Outcome{OutcomeCompleted, OutcomeFailed, OutcomeDeadLetter, OutcomeLeaseExpired, OutcomeReplayed}

// Outcomes returns every outcome, a fresh slice each call.
func Outcomes() []Outcome { return slices.Clone(outcomes) }

// Record is one finished attempt as the control plane sees it. Every field
// is a number, a time or a value checked against a fixed list or a narrow
// pattern by [Record.Validate]: there is no map and no free text, so nothing
// but this metadata can travel in one.
type Record struct {
	// AttemptID is the attempt's id: job_attempts.id, or for a success kept
	// on its job row jobs.completed_attempt_id (one sequence for both). The
	// cursor, and with the tenant the control plane's idempotency key.
	AttemptID int64 `json:"attempt_id"`
	// Job is the opaque job id: hex HMAC-SHA256 of jobs.id under the
	// deployment's key (64 hex digits), or jobs.id in decimal when the
	// operator sends database ids.
	Job string `json:"job"`
	// Outcome is one of [Outcomes].
	Outcome Outcome `json:"outcome"`
	// Attempt is the attempt number (0 for a replay of a job never tried).
	Attempt int `json:"attempt"`
	// DurationMS is finished_at − started_at in milliseconds.
	DurationMS float64 `json:"duration_ms"`
	// ErrorClass is one of consumers.Classes(), or empty.
	ErrorClass consumers.ErrorClass `json:"error_class,omitempty"`
	// StartedAt and FinishedAt bound the attempt.
	StartedAt  time.Time `json:"started_at"`
	FinishedAt time.Time `json:"finished_at"`
	// Provider is the source name; sent only when the operator opts in.
	Provider string `json:"provider,omitempty"`
	// EventType is the event's type; sent only when the operator opts in.
	EventType string `json:"event_type,omitempty"`
}

// Batch is the body of POST /api/v1/reports.
type Batch struct {
	Records []Record `json:"records"`
}

// Cursor is the answer of GET /api/v1/cursor: the highest attempt id the
// control plane holds for the tenant, 0 for none.
type Cursor struct {
	AttemptID int64 `json:"attempt_id"`
	// Arrival is the tenant's highest arrival number held (as
	// [Answer.Arrival]), 0 for none. Nil from a control plane that does not
	// answer it (releases before it).
	Arrival *int64 `json:"arrival,omitempty"`
}

// Answer is the answer of POST /api/v1/reports.
type Answer struct {
	// Received is how many records the batch had, Stored how many of them
	// the control plane did not hold yet.
	Received int   `json:"received"`
	Stored   int64 `json:"stored"`
	// CursorBefore is the tenant's cursor (as [Cursor]) as it was before
	// the batch was stored. Below the highest attempt id the reporter had
	// acknowledged, the control plane lost records (its database restored
	// from a backup), which the reporter sends again. Nil from a control
	// plane that does not answer it (releases before it).
	CursorBefore *int64 `json:"cursor_before,omitempty"`
	// ArrivalBefore and Arrival are the tenant's highest arrival number
	// held before and after the batch was stored (0 for none). The control
	// plane numbers the records it stores in the order they arrive, so a
	// number below the highest the reporter had acknowledged means records
	// were lost, also when they were stored under attempt ids below the
	// cursor (attempts that committed late), which CursorBefore does not
	// show; the reporter then sends again what it sent since. Nil from a
	// control plane that does not answer them (releases before them).
	ArrivalBefore *int64 `json:"arrival_before,omitempty"`
	Arrival       *int64 `json:"arrival,omitempty"`
}

// MaxBatch is the most records one batch may carry.
const MaxBatch = 1000

var (
	jobPattern       = regexp.MustCompile(`^(?:[0-9a-f]{64}|[1-9][0-9]{0,18})$`)
	providerPattern  = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)
	eventTypePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}$`)
)

// ErrInvalidRecord is wrapped by every error of [Record.Validate].
var ErrInvalidRecord = errors.New("invalid record")

// Validate reports the first field outside what a record may carry.
func (r Record) Validate() error {
	bad := func(field, why string) error { return fmt.Errorf("%w: %s: %s", ErrInvalidRecord, field, why) }
	switch {
	case r.AttemptID < 1:
		return bad("attempt_id", "must be a positive integer")
	case !jobPattern.MatchString(r.Job):
		return bad("job", "must be 64 lower-case hex digits or a decimal id")
	case !slices.Contains(outcomes, r.Outcome):
		// The value is not quoted: it may be anything a row held, and this
		// error is logged and sent (never a record's free text).
		return bad("outcome", fmt.Sprintf("must be one of %v", outcomes))
	case r.Attempt < 0 || r.Attempt > 1_000_000:
		return bad("attempt", "must be 0..1000000")
	case r.DurationMS < 0 || r.DurationMS > 366*24*3600*1000:
		return bad("duration_ms", "must be 0 or more and under a year")
	case r.ErrorClass != "" && !slices.Contains(consumers.Classes(), r.ErrorClass):
		return bad("error_class", fmt.Sprintf("must be one of %v", consumers.Classes()))
	case r.StartedAt.IsZero() || r.FinishedAt.IsZero():
		return bad("started_at, finished_at", "required")
	case !inYearRange(r.StartedAt) || !inYearRange(r.FinishedAt):
		return bad("started_at, finished_at", "must be in years 1..9999")
	case r.FinishedAt.Before(r.StartedAt):
		return bad("finished_at", "before started_at")
	case r.Provider != "" && !providerPattern.MatchString(r.Provider):
		return bad("provider", "must be a source name (lower-case letters, digits, '-', '_')")
	case r.EventType != "" && !eventTypePattern.MatchString(r.EventType):
		return bad("event_type", "must be letters, digits and . _ : / - (at most 128)")
	}
	return nil
}

// inYearRange reports whether t falls in years 1..9999, in UTC and in its
// own zone: JSON (RFC 3339) has four digits for a year, and a row's time
// may be anything PostgreSQL holds (4713 BC to 294276 AD); a record the
// reporter could not encode would hold its batch back for ever.
func inYearRange(t time.Time) bool {
	for _, y := range []int{t.Year(), t.UTC().Year()} {
		if y < 1 || y > 9999 {
			return false
		}
	}
	return true
}

// Validate checks the batch's size and every record.
func (b Batch) Validate() error {
	if len(b.Records) > MaxBatch {
		return fmt.Errorf("%w: %d records, at most %d per batch", ErrInvalidRecord, len(b.Records), MaxBatch)
	}
	for i, r := range b.Records {
		if err := r.Validate(); err != nil {
			return fmt.Errorf("records[%d]: %w", i, err)
		}
	}
	return nil
}
