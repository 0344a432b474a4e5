package consumertest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inlet-dev/inlet/consumers/bus"
	"github.com/inlet-dev/inlet/internal/database"
	"github.com/inlet-dev/inlet/internal/pgtest"
	"github.com/inlet-dev/inlet/internal/testwait"
	"github.com/inlet-dev/inlet/schema"
	"github.com/inlet-dev/inlet/schema/queries"
)

// Bundle is what a consumer test needs.
type Bundle struct {
	// Admin is a superuser pool: test setup and inspection only.
	Admin *pgxpool.Pool
	// Worker is a pool with role webhook_worker, as the service runs.
	Worker *pgxpool.Pool
	// Bus is an in-process transport.
	Bus bus.PubSub
}

// New makes a bundle on a fresh database; everything closes when t ends.
func New(t testing.TB) *Bundle {
	t.Helper()
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	admin, err := database.Open(ctx, url, database.Options{MaxConns: 4, AppName: "consumertest-admin"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admin.Close)
	worker, err := database.Open(ctx, url, database.Options{Role: "webhook_worker", MaxConns: 8, AppName: "consumertest-worker"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(worker.Close)
	ps := bus.NewGoChannel(slog.New(slog.NewTextHandler(io.Discard, nil)))
	t.Cleanup(func() { _ = ps.Close() })
	return &Bundle{Admin: admin, Worker: worker, Bus: ps}
}

// EventParams describe one stored webhook.
type EventParams struct {
	Provider   string // defaults to "stripe"
	ExternalID string // defaults to a unique id
	EventType  string
	Headers    map[string][]string
	Body       []byte
	OccurredAt time.Time // zero: NULL
}

var eventSeq sync.Mutex
var eventN int

// InsertEvent stores an event as ingress would (the fan-out trigger makes its
// jobs) and returns its id.
func (b *Bundle) InsertEvent(t testing.TB, p EventParams) int64 {
	t.Helper()
	if p.Provider == "" {
		p.Provider = "stripe"
	}
	if p.ExternalID == "" {
		eventSeq.Lock()
		eventN++
		p.ExternalID = fmt.Sprintf("evt_test_%d", eventN)
		eventSeq.Unlock()
	}
	if p.Headers == nil {
		p.Headers = map[string][]string{}
	}
	if p.Body == nil {
		p.Body = []byte{}
	}
	headers, err := json.Marshal(p.Headers)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := b.Admin.Exec(ctx, schema.Query("InsertEvent"),
		p.Provider, p.Provider, p.ExternalID, p.EventType, headers, p.Body, true, int16(0), "/webhooks/"+p.Provider, "", false, occurredAt(p.OccurredAt), 0); err != nil {
		t.Fatalf("insert event %s: %v", p.ExternalID, err)
	}
	var id int64
	if err := b.Admin.QueryRow(ctx, `SELECT id FROM webhook_ingress.events WHERE provider = $1 AND external_event_id = $2`,
		p.Provider, p.ExternalID).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}

// JobID returns the id of the job of (eventID, handler), failing t if none.
func (b *Bundle) JobID(t testing.TB, eventID int64, handler string) int64 {
	t.Helper()
	var id int64
	err := b.Admin.QueryRow(context.Background(),
		`SELECT id FROM webhook_ingress.jobs WHERE event_id = $1 AND handler = $2`, eventID, handler).Scan(&id)
	if err != nil {
		t.Fatalf("job of event %d for handler %q: %v", eventID, handler, err)
	}
	return id
}

// Job is a jobs row, the columns tests look at.
type Job struct {
	Status         string
	AttemptCount   int
	MaxAttempts    int
	NextAttemptAt  time.Time
	LeaseExpiresAt *time.Time
	LastError      *string
	LastErrorClass *string
}

// Job reads job id.
func (b *Bundle) Job(t testing.TB, id int64) Job {
	t.Helper()
	var j Job
	err := b.Admin.QueryRow(context.Background(), `SELECT status, attempt_count, max_attempts, next_attempt_at,
		lease_expires_at, last_error, last_error_class FROM webhook_ingress.jobs WHERE id = $1`, id).Scan(
		&j.Status, &j.AttemptCount, &j.MaxAttempts, &j.NextAttemptAt, &j.LeaseExpiresAt, &j.LastError, &j.LastErrorClass)
	if err != nil {
		t.Fatalf("read job %d: %v", id, err)
	}
	return j
}

// Attempt is a row of the view webhook_ingress.attempts: a job_attempts row,
// or a job's successful attempt, kept on the job row.
type Attempt struct {
	Attempt    int
	WorkerID   *string
	StartedAt  time.Time
	FinishedAt time.Time
	Outcome    string
	ErrorClass *string
	Error      *string
}

// Attempts returns job id's history, oldest first.
func (b *Bundle) Attempts(t testing.TB, jobID int64) []Attempt {
	t.Helper()
	rows, err := b.Admin.Query(context.Background(), `SELECT attempt, worker_id, started_at, finished_at, outcome, error_class, error
		FROM webhook_ingress.attempts WHERE job_id = $1 ORDER BY id`, jobID)
	if err != nil {
		t.Fatal(err)
	}
	as, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Attempt, error) {
		var a Attempt
		err := r.Scan(&a.Attempt, &a.WorkerID, &a.StartedAt, &a.FinishedAt, &a.Outcome, &a.ErrorClass, &a.Error)
		return a, err
	})
	if err != nil {
		t.Fatal(err)
	}
	return as
}

// Outcomes returns job id's attempt outcomes, oldest first.
func (b *Bundle) Outcomes(t testing.TB, jobID int64) []string {
	t.Helper()
	var out []string
	for _, a := range b.Attempts(t, jobID) {
		out = append(out, a.Outcome)
	}
	return out
}

// WaitJobStatus waits until job id has status, failing t after timeout with
// the status it last had.
func (b *Bundle) WaitJobStatus(t testing.TB, id int64, status string, timeout time.Duration) Job {
	t.Helper()
	var j Job
	testwait.Eventually(t, timeout, fmt.Sprintf("job %d status %s", id, status), func() (bool, string) {
		j = b.Job(t, id)
		return j.Status == status, fmt.Sprintf("status %s after %d attempts", j.Status, j.AttemptCount)
	})
	return j
}

// WaitFor waits until cond holds, failing t after timeout. Prefer
// testwait.Eventually where the failure can say what was seen.
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	testwait.Eventually(t, timeout, what, func() (bool, string) { return cond(), "not yet" })
}

// StreamerOptions tune the test streamer.
type StreamerOptions struct {
	// Lease is the lease each claim takes. Defaults to 10s.
	Lease time.Duration
	// Tick is the claim interval. Defaults to 10ms.
	Tick time.Duration
}

// Claim is one lease the streamer took.
type Claim struct {
	Ref bus.Ref
	At  time.Time
}

// Streamer is a minimal streamer: claim due jobs, reap expired leases,
// publish references.
type Streamer struct {
	mu     sync.Mutex
	claims []Claim
}

// Claims returns every lease taken so far.
func (s *Streamer) Claims() []Claim {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Claim(nil), s.claims...)
}

// ClaimsOf returns the leases taken on job id.
func (s *Streamer) ClaimsOf(id int64) []Claim {
	var out []Claim
	for _, c := range s.Claims() {
		if c.Ref.JobID == id {
			out = append(out, c)
		}
	}
	return out
}

// StartStreamer runs the test streamer until t ends. Start the consumer
// service first: the in-process bus drops messages nobody subscribes to.
func (b *Bundle) StartStreamer(t testing.TB, opts StreamerOptions) *Streamer {
	t.Helper()
	if opts.Lease == 0 {
		opts.Lease = 10 * time.Second
	}
	if opts.Tick == 0 {
		opts.Tick = 10 * time.Millisecond
	}
	s := &Streamer{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(opts.Tick)
		defer tick.Stop()
		for {
			// Not ctx: a query cancelled mid-flight costs pgx a cancel
			// request and a second of waiting; stop between rounds instead.
			if err := b.streamOnce(context.Background(), s, opts.Lease); err != nil {
				t.Errorf("test streamer: %v", err)
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return s
}

func (b *Bundle) streamOnce(ctx context.Context, s *Streamer, lease time.Duration) error {
	var refs []bus.Ref
	err := AsRole(ctx, b.Admin, "webhook_streamer", func(tx pgx.Tx) error {
		if _, err := queries.New(tx).ReapExpiredLeases(ctx, 100); err != nil {
			return fmt.Errorf("reap: %w", err)
		}
		var err error
		refs, err = claim(ctx, tx, lease)
		if err != nil {
			return fmt.Errorf("claim: %w", err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	now := time.Now()
	byHandler := map[string][]bus.Ref{}
	var handlers []string
	for _, ref := range refs {
		s.mu.Lock()
		s.claims = append(s.claims, Claim{Ref: ref, At: now})
		s.mu.Unlock()
		if byHandler[ref.Handler] == nil {
			handlers = append(handlers, ref.Handler)
		}
		byHandler[ref.Handler] = append(byHandler[ref.Handler], ref)
	}
	// As the streamer does by default: a handler's references of one claim
	// in one message (up to 32 each there; a claim here is at most 100).
	for _, h := range handlers {
		if err := b.PublishBatch(byHandler[h]); err != nil {
			return err
		}
	}
	return nil
}

// claimedRef reads one row of ClaimJobs as the reference the streamer
// publishes for it.
// claim leases up to 100 due jobs for lease as the streamer does
// (ClaimJobs) and returns their references.
func claim(ctx context.Context, tx pgx.Tx, lease time.Duration) ([]bus.Ref, error) {
	rows, err := queries.New(tx).ClaimJobs(ctx, queries.ClaimJobsParams{
		FullHandlers: []string{}, BatchSize: 100, LeaseHolder: "test-streamer", LeaseFor: lease,
	})
	if err != nil {
		return nil, err
	}
	refs := make([]bus.Ref, len(rows))
	for i, j := range rows {
		refs[i] = bus.Ref{JobID: j.ID, EventID: j.EventID, Handler: j.Handler, Provider: j.Provider, EventType: j.EventType,
			Attempt: int(j.AttemptCount), LeaseExpiresAt: j.LeaseExpiresAt, EventReceivedAt: j.EventReceivedAt, LeasedAt: j.AttemptedAt}
	}
	return refs, nil
}

// Publish sends ref on its handler's topic.
func (b *Bundle) Publish(ref bus.Ref) error {
	msg, err := bus.NewMessage(ref)
	if err != nil {
		return err
	}
	return b.Bus.Publish(bus.Topic(ref.Handler), msg)
}

// PublishBatch sends refs in one message (bus.NewBatchMessage) on the topic
// of the first one's handler.
func (b *Bundle) PublishBatch(refs []bus.Ref) error {
	msg, err := bus.NewBatchMessage(refs)
	if err != nil {
		return err
	}
	return b.Bus.Publish(bus.Topic(refs[0].Handler), msg)
}

// ClaimOnce claims every due job once, as the streamer would, without
// publishing, and returns the references.
func (b *Bundle) ClaimOnce(t testing.TB, lease time.Duration) []bus.Ref {
	t.Helper()
	ctx := context.Background()
	var refs []bus.Ref
	err := AsRole(ctx, b.Admin, "webhook_streamer", func(tx pgx.Tx) error {
		var err error
		refs, err = claim(ctx, tx, lease)
		return err
	})
	if err != nil {
		t.Fatalf("claim jobs: %v", err)
	}
	return refs
}

// AsRole runs f in a transaction under SET LOCAL ROLE role and commits it.
func AsRole(ctx context.Context, pool *pgxpool.Pool, role string, f func(tx pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SET LOCAL ROLE "+pgx.Identifier{role}.Sanitize()); err != nil {
			return err
		}
		return f(tx)
	})
}

// LockedBuffer is an io.Writer safe for concurrent use, for capturing logs.
type LockedBuffer struct {
	mu  sync.Mutex
	buf []byte
}

func (b *LockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	return len(p), nil
}

// String returns everything written so far.
func (b *LockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}

func occurredAt(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}
