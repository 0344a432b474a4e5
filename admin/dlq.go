package admin

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/schema"
)

// DeadLetterFilter selects dead-lettered jobs. Zero fields do not filter.
type DeadLetterFilter struct {
	// Handler is the exact handler name.
	Handler string
	// Provider is the exact source name.
	Provider string
	// ErrorClass is the exact last_error_class (e.g. "permanent", "timeout",
	// "lease_expired").
	ErrorClass string
	// Since (inclusive) and Until (exclusive) bound when the job was
	// dead-lettered (jobs.updated_at).
	Since, Until time.Time
	// Before is the keyset cursor on the job id, as in EventFilter.
	Before int64
	// Limit is the page size. Defaults to DefaultLimit, at most MaxLimit.
	Limit int
}

// DeadLetter is one row of [ListDeadLetters]: the job and its event's
// identity. The error text is left out; [GetJob] has it.
type DeadLetter struct {
	JobID           int64     `json:"job_id"`
	EventID         int64     `json:"event_id"`
	Handler         string    `json:"handler"`
	Provider        string    `json:"provider"`
	EventType       string    `json:"event_type"`
	AttemptCount    int       `json:"attempt_count"`
	MaxAttempts     int       `json:"max_attempts"`
	LastErrorClass  string    `json:"last_error_class"`
	DeadSince       time.Time `json:"dead_since"`
	ExternalEventID string    `json:"external_event_id"`
	ReceivedAt      time.Time `json:"received_at"`
}

// DeadLetterPage is one page of dead letters, newest job first.
type DeadLetterPage struct {
	DeadLetters []DeadLetter `json:"dead_letters"`
	// NextBefore is the Before of the next page; 0 when this is the last.
	NextBefore int64 `json:"next_before,omitempty"`
}

// ListDeadLetters returns a page of the dead letters matching f.
func ListDeadLetters(ctx context.Context, db DB, f DeadLetterFilter) (DeadLetterPage, error) {
	limit, err := checkPage(f.Limit, f.Before, "job", f.Since, f.Until)
	if err != nil {
		return DeadLetterPage{}, err
	}
	page := DeadLetterPage{DeadLetters: []DeadLetter{}}
	err = readTx(ctx, db, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, schema.Query("AdminListDeadLetters"),
			f.Handler, f.Provider, f.ErrorClass, nullTime(f.Since), nullTime(f.Until), f.Before, limit)
		if err != nil {
			return err
		}
		page.DeadLetters, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (DeadLetter, error) {
			var d DeadLetter
			err := r.Scan(&d.JobID, &d.EventID, &d.Handler, &d.Provider, &d.EventType, &d.AttemptCount, &d.MaxAttempts,
				&d.LastErrorClass, &d.DeadSince, &d.ExternalEventID, &d.ReceivedAt)
			return d, err
		})
		return err
	})
	if err != nil {
		return DeadLetterPage{}, fmt.Errorf("list dead letters: %w", err)
	}
	if len(page.DeadLetters) == limit {
		page.NextBefore = page.DeadLetters[len(page.DeadLetters)-1].JobID
	}
	return page, nil
}

// JobDetail is one job with its attempts (error text included: operators
// work inside the data plane) and its event's metadata.
type JobDetail struct {
	Job
	Event EventMeta `json:"event"`
}

// GetJob returns job id, whatever its status, with its attempt history and
// its event's metadata (not the body: [GetEvent] has it).
func GetJob(ctx context.Context, db DB, id int64) (JobDetail, error) {
	var d JobDetail
	err := readTx(ctx, db, func(tx pgx.Tx) error {
		var sum []byte
		e := &d.Event
		j, err := scanJob(tx.QueryRow(ctx, schema.Query("AdminGetJob"), id),
			&e.ID, &e.Provider, &e.Scheme, &e.ExternalEventID, &e.EventType, &e.ReceivedAt,
			&e.SignatureVerified, &e.SecretIndex, &e.BodySize, &sum, &e.OccurredAt)
		if errors.Is(err, pgx.ErrNoRows) {
			return notFound("no such job")
		}
		if err != nil {
			return err
		}
		e.BodySHA256 = hex.EncodeToString(sum)
		jobs := []Job{j}
		if err := attachAttempts(ctx, tx, jobs); err != nil {
			return err
		}
		d.Job = jobs[0]
		return nil
	})
	if err != nil {
		return JobDetail{}, fmt.Errorf("show job %d: %w", id, err)
	}
	return d, nil
}
