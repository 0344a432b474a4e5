package admin_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inlet-dev/inlet/admin"
	"github.com/inlet-dev/inlet/ingress/verify"
	"github.com/inlet-dev/inlet/internal/database"
	"github.com/inlet-dev/inlet/internal/pgtest"
	"github.com/inlet-dev/inlet/schema"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// testBundle is what an admin test needs.
type testBundle struct {
	url string
	// super is a superuser pool: setup and inspection only.
	super *pgxpool.Pool
	// op runs as webhook_operator, as the CLI and the API do.
	op      *pgxpool.Pool
	sources admin.Sources
}

var testSources = admin.Sources{
	"stripe": {Type: "stripe", Secrets: []string{"whsec_admin_test"}},
	"github": {Type: "github", Secrets: []string{"admin-test-github-secret"}},
	"gitlab": {Type: "gitlab", Secrets: []string{"admin-test-gitlab-token"}},
	"twilio": {Type: "twilio", Secrets: []string{"admin-test-twilio-token"}, PublicURL: "https://hooks.example.com/webhooks/twilio"},
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	super, err := database.Open(ctx, url, database.Options{MaxConns: 4, AppName: "admin-test-super"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(super.Close)
	op, err := database.Open(ctx, url, database.Options{Role: schema.OperatorRole, MaxConns: 4, AppName: "admin-test-operator"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(op.Close)
	return &testBundle{url: url, super: super, op: op, sources: testSources}
}

func (b *testBundle) exec(t *testing.T, sql string, args ...any) {
	t.Helper()
	if _, err := b.super.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func (b *testBundle) count(t *testing.T, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := b.super.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

func (b *testBundle) subscribe(t *testing.T, handler, provider, eventType string, maxAttempts int) {
	t.Helper()
	b.exec(t, `INSERT INTO webhook_ingress.subscriptions (handler, provider_pattern, event_type_pattern, max_attempts) VALUES ($1, $2, $3, $4)`,
		handler, provider, eventType, maxAttempts)
}

// event is a stored webhook for a test.
type event struct {
	source, id, eventType string
	body                  []byte
	headers               http.Header
	requestURI            string
	receivedAt            time.Time // zero: now
}

// insert stores e as ingress would (the fan-out trigger makes its jobs) and
// returns its id.
func (b *testBundle) insert(t *testing.T, e event) int64 {
	t.Helper()
	scheme := e.source
	if c, ok := b.sources[e.source]; ok {
		scheme = c.Type
	}
	if e.headers == nil {
		e.headers = http.Header{}
	}
	if e.requestURI == "" {
		e.requestURI = "/webhooks/" + e.source
	}
	var received any
	if !e.receivedAt.IsZero() {
		received = e.receivedAt
	}
	hdr, _ := json.Marshal(e.headers)
	var id int64
	err := b.super.QueryRow(context.Background(), `INSERT INTO webhook_ingress.events
		(provider, scheme, external_event_id, event_type, received_at, headers, request_uri, raw_body, signature_verified, secret_index)
		VALUES ($1, $2, $3, $4, coalesce($5, now()), $6, $7, $8, true, 0) RETURNING id`,
		e.source, scheme, e.id, e.eventType, received, hdr, e.requestURI, e.body).Scan(&id)
	if err != nil {
		t.Fatalf("insert event %s: %v", e.id, err)
	}
	return id
}

// ingest signs a test webhook of source as its provider would, verifies it as
// ingress does (redacting what ingress redacts) and stores it.
func (b *testBundle) ingest(t *testing.T, source, id string) int64 {
	t.Helper()
	cfg := b.sources[source]
	uri := "/webhooks/" + source + "?tenant=t1"
	reqURL := "http://inlet.internal:8080" + uri
	h, body, err := verify.SignTest(cfg, id, nil, reqURL, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	v, err := verify.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	res, err := v.Verify(&verify.Request{Header: h, Body: body, URL: reqURL})
	if err != nil {
		t.Fatalf("ingest %s %s: %v", source, id, err)
	}
	if r, ok := v.(verify.StorageRedactor); ok {
		h = r.RedactForStorage(h)
	}
	return b.insert(t, event{source: source, id: res.EventID, eventType: res.EventType, body: body, headers: h, requestURI: uri})
}

// jobID returns the job of event for handler.
func (b *testBundle) jobID(t *testing.T, eventID int64, handler string) int64 {
	t.Helper()
	var id int64
	if err := b.super.QueryRow(context.Background(), `SELECT id FROM webhook_ingress.jobs WHERE event_id = $1 AND handler = $2`,
		eventID, handler).Scan(&id); err != nil {
		t.Fatalf("job of event %d for %s: %v", eventID, handler, err)
	}
	return id
}

// deadLetter makes job id a dead letter after attempts failed attempts, as
// the consumers would have left it.
func (b *testBundle) deadLetter(t *testing.T, id int64, attempts int, class string) {
	t.Helper()
	for a := 1; a <= attempts; a++ {
		outcome := "failed"
		if a == attempts {
			outcome = "dead_letter"
		}
		b.exec(t, `INSERT INTO webhook_ingress.job_attempts (job_id, event_received_at, attempt, worker_id, started_at, outcome, error_class, error)
			SELECT id, event_received_at, $2, 'w1', now() - interval '1 second', $3, $4, 'upstream said no'
			FROM webhook_ingress.jobs WHERE id = $1`, id, a, outcome, class)
	}
	b.exec(t, `UPDATE webhook_ingress.jobs SET status = 'dead_letter', attempt_count = $2, last_error = 'upstream said no',
		last_error_class = $3, worker_id = 'w1', updated_at = now() WHERE id = $1`, id, attempts, class)
}

// complete makes attempt n of job id its successful one by consumer worker,
// as the consumers record it since 010_lease_token: on the job row, under an
// id from job_attempts' sequence, with no history row. The attempt was
// leased two seconds before. It returns the attempt's id.
func (b *testBundle) complete(t *testing.T, id int64, n int, worker string) int64 {
	t.Helper()
	var attemptID int64
	if err := b.super.QueryRow(context.Background(), `UPDATE webhook_ingress.jobs
		SET status = 'completed', attempt_count = $2, attempted_at = now() - interval '2 seconds', completed_at = now(),
		    completed_attempt_id = nextval('webhook_ingress.job_attempts_id_seq'), worker_id = $3,
		    lease_holder_id = NULL, lease_expires_at = NULL, last_error = NULL, last_error_class = NULL, updated_at = now()
		WHERE id = $1 RETURNING completed_attempt_id`, id, n, worker).Scan(&attemptID); err != nil {
		t.Fatalf("complete job %d: %v", id, err)
	}
	return attemptID
}

type jobRow struct {
	Status       string
	AttemptCount int
	Lease        *string
	Worker       *string
	LastError    *string
	Due          bool
}

func (b *testBundle) job(t *testing.T, id int64) jobRow {
	t.Helper()
	var j jobRow
	err := b.super.QueryRow(context.Background(), `SELECT status, attempt_count, lease_holder_id, worker_id, last_error, next_attempt_at <= now()
		FROM webhook_ingress.jobs WHERE id = $1`, id).Scan(&j.Status, &j.AttemptCount, &j.Lease, &j.Worker, &j.LastError, &j.Due)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// snapshot is a digest of every row of jobs, job_attempts and events, to
// prove an operation changed nothing (or nothing in events).
func (b *testBundle) snapshot(t *testing.T, table string) string {
	t.Helper()
	var s string
	if err := b.super.QueryRow(context.Background(),
		`SELECT coalesce(md5(string_agg(t::text, '|' ORDER BY t.id)), '') FROM webhook_ingress.`+table+` t`).Scan(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

func wantErr(t *testing.T, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("error = %v, want %v", err, target)
	}
}

// listen returns a channel that gets one value per NOTIFY on the streamers'
// channel.
func (b *testBundle) listen(t *testing.T) <-chan struct{} {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	conn, err := pgx.Connect(ctx, b.url)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `LISTEN webhook_ingress_jobs`); err != nil {
		t.Fatal(err)
	}
	ch := make(chan struct{}, 16)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			if _, err := conn.WaitForNotification(ctx); err != nil {
				return
			}
			ch <- struct{}{}
		}
	}()
	t.Cleanup(func() { cancel(); <-done; conn.Close(context.Background()) })
	return ch
}
