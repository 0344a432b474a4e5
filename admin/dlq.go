package admin

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/schema/queries"
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
	// OrderKey is the entity key of an ordered handler's job, and Holding
	// how many later jobs of that key it holds back until it is replayed
	// (order_policy block; 0 under skip).
	OrderKey *string `json:"order_key,omitempty"`
	Holding  int64   `json:"holding,omitempty"`
	// Replays is how many times the job was replayed (its replay markers):
	// with its status, the version ReplayRequest.ExpectReplays checks.
	Replays int `json:"replays"`
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
	if err == nil {
		err = checkText("handler", f.Handler, "source", f.Provider, "error_class", f.ErrorClass)
	}
	if err != nil {
		return DeadLetterPage{}, err
	}
	page := DeadLetterPage{DeadLetters: []DeadLetter{}}
	err = readTx(ctx, db, func(tx pgx.Tx) error {
		rows, err := queries.New(tx).AdminListDeadLetters(ctx, queries.AdminListDeadLettersParams{
			Handler: f.Handler, Provider: f.Provider, ErrorClass: f.ErrorClass, Since: nullTime(f.Since), Until: nullTime(f.Until),
			BeforeID: f.Before, PageSize: int64(limit) + 1}) // one more: is there a next page?
		if err != nil {
			return err
		}
		for _, r := range rows {
			page.DeadLetters = append(page.DeadLetters, DeadLetter{JobID: r.ID, EventID: r.EventID, Handler: r.Handler,
				Provider: r.Provider, EventType: r.EventType, AttemptCount: int(r.AttemptCount), MaxAttempts: int(r.MaxAttempts),
				LastErrorClass: r.LastErrorClass, DeadSince: r.UpdatedAt, ExternalEventID: r.ExternalEventID, ReceivedAt: r.ReceivedAt,
				OrderKey: r.OrderKey, Holding: r.Holding, Replays: int(r.Replays)})
		}
		return nil
	})
	if err != nil {
		return DeadLetterPage{}, fmt.Errorf("list dead letters: %w", err)
	}
	if len(page.DeadLetters) > limit {
		page.DeadLetters = page.DeadLetters[:limit]
		page.NextBefore = page.DeadLetters[limit-1].JobID
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
		r, err := queries.New(tx).AdminGetJob(ctx, id)
		if errors.Is(err, pgx.ErrNoRows) {
			return notFound("no such job")
		}
		if err != nil {
			return err
		}
		d.Event = EventMeta{ID: r.EID, Provider: r.EProvider, Scheme: r.EScheme, ExternalEventID: r.EExternalEventID,
			EventType: r.EEventType, ReceivedAt: r.EReceivedAt, SignatureVerified: r.ESignatureVerified, SecretIndex: r.ESecretIndex,
			BodySize: int64(r.EBodySize), BodySHA256: hex.EncodeToString(r.EBodySha256), OccurredAt: r.EOccurredAt}
		j := jobOf(queries.AdminEventJobsRow{ID: r.ID, EventID: r.EventID, Handler: r.Handler, Provider: r.Provider,
			EventType: r.EventType, Status: r.Status, AttemptCount: r.AttemptCount, MaxAttempts: r.MaxAttempts,
			NextAttemptAt: r.NextAttemptAt, LeaseHolderID: r.LeaseHolderID, LeaseExpiresAt: r.LeaseExpiresAt,
			AttemptedAt: r.AttemptedAt, WorkerID: r.WorkerID, LastError: r.LastError, LastErrorClass: r.LastErrorClass,
			CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt, CompletedAt: r.CompletedAt})
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
