package reporter_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inlet-dev/inlet/admin"
	"github.com/inlet-dev/inlet/controlplane"
	"github.com/inlet-dev/inlet/internal/database"
	"github.com/inlet-dev/inlet/internal/pgtest"
	"github.com/inlet-dev/inlet/internal/testwait"
	"github.com/inlet-dev/inlet/reporter"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

const (
	tenantToken = "reporter-test-tenant-token"
	hmacKey     = "reporter-test-hmac-key-0123"
	errorText   = "dial tcp 10.1.2.3:443: secret-error-text"
)

// controlPlane is a real control plane over real HTTP that records every
// report body it is sent and can be taken down (connections dropped unanswered).
type controlPlane struct {
	url  string
	pool *pgxpool.Pool
	down atomic.Bool
	// requests counts every request, refused those dropped while down.
	requests, refused atomic.Int64
	mu                sync.Mutex
	bodies            [][]byte
}

func newControlPlane(t *testing.T) *controlPlane {
	t.Helper()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, pgtest.NewEmptyDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if _, err := controlplane.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	srv, err := controlplane.New(controlplane.Config{Pool: pool, Tenants: []controlplane.Tenant{{Name: "acme", Token: tenantToken}}})
	if err != nil {
		t.Fatal(err)
	}
	cp := &controlPlane{pool: pool}
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cp.requests.Add(1)
		if cp.down.Load() {
			cp.refused.Add(1)
			panic(http.ErrAbortHandler) // as if nothing listened: no answer at all
		}
		if r.Method == http.MethodPost {
			b, _ := io.ReadAll(r.Body)
			cp.mu.Lock()
			cp.bodies = append(cp.bodies, b)
			cp.mu.Unlock()
			r.Body = io.NopCloser(bytes.NewReader(b))
		}
		srv.ServeHTTP(w, r)
	}))
	t.Cleanup(hs.Close)
	cp.url = hs.URL
	return cp
}

// sent is every record the control plane was sent, decoded field by field.
func (cp *controlPlane) sent(t *testing.T) []map[string]json.RawMessage {
	t.Helper()
	cp.mu.Lock()
	defer cp.mu.Unlock()
	var out []map[string]json.RawMessage
	for _, b := range cp.bodies {
		var batch map[string][]map[string]json.RawMessage
		if err := json.Unmarshal(b, &batch); err != nil {
			t.Fatalf("report body is not a batch: %v", err)
		}
		for k := range batch {
			if k != "records" {
				t.Errorf("batch has a field %q", k)
			}
		}
		out = append(out, batch["records"]...)
	}
	return out
}

type storedRow struct {
	attemptID                     int64
	job, outcome                  string
	attempt                       int
	durationMS                    float64
	errorClass, provider, evtType *string
	startedAt, finishedAt         time.Time
}

func (cp *controlPlane) rows(t *testing.T) []storedRow {
	t.Helper()
	rows, err := cp.pool.Query(context.Background(), `SELECT attempt_id, job, outcome, attempt, duration_ms, error_class,
		provider, event_type, started_at, finished_at FROM control_plane.attempts WHERE tenant = 'acme' ORDER BY attempt_id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []storedRow
	for rows.Next() {
		var r storedRow
		if err := rows.Scan(&r.attemptID, &r.job, &r.outcome, &r.attempt, &r.durationMS, &r.errorClass,
			&r.provider, &r.evtType, &r.startedAt, &r.finishedAt); err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// waitStored waits until the control plane holds n records.
func (cp *controlPlane) waitStored(t *testing.T, n int) []storedRow {
	t.Helper()
	var rows []storedRow
	testwait.Eventually(t, 20*time.Second, fmt.Sprintf("%d records in the control plane", n), func() (bool, string) {
		rows = cp.rows(t)
		return len(rows) >= n, fmt.Sprintf("%d records", len(rows))
	})
	if len(rows) != n {
		t.Fatalf("control plane holds %d records, want %d", len(rows), n)
	}
	return rows
}

// waitRequests waits until the control plane has had n requests more than
// the count from (of requests or refused).
func (cp *controlPlane) waitRequests(t *testing.T, what string, count *atomic.Int64, from int64, n int64) {
	t.Helper()
	testwait.Eventually(t, 20*time.Second, what, func() (bool, string) {
		got := count.Load() - from
		return got >= n, fmt.Sprintf("%d so far", got)
	})
}

// dataPlane is a migrated Inlet database with a subscribed handler.
type dataPlane struct {
	url   string
	super *pgxpool.Pool
	n     int
}

func newDataPlane(t *testing.T) *dataPlane {
	t.Helper()
	url := pgtest.NewDatabase(t)
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if _, err := pool.Exec(context.Background(), `INSERT INTO webhook_ingress.subscriptions (handler, provider_pattern) VALUES ('forward', 'github')`); err != nil {
		t.Fatal(err)
	}
	return &dataPlane{url: url, super: pool}
}

// job stores an event (the fan-out trigger creates its job) and returns the
// job's id.
func (d *dataPlane) job(t *testing.T) int64 {
	t.Helper()
	ctx := context.Background()
	d.n++
	var eventID int64
	if err := d.super.QueryRow(ctx, `INSERT INTO webhook_ingress.events
		(provider, scheme, external_event_id, event_type, headers, raw_body, signature_verified)
		VALUES ('github', 'github', $1, 'push', '{"X-Secret-Header": ["hdr-value"]}', '\x626f64792d6279746573', true)
		RETURNING id`, "delivery-"+strconv.Itoa(d.n)).Scan(&eventID); err != nil {
		t.Fatal(err)
	}
	var jobID int64
	if err := d.super.QueryRow(ctx, `SELECT id FROM webhook_ingress.jobs WHERE event_id = $1`, eventID).Scan(&jobID); err != nil {
		t.Fatal(err)
	}
	return jobID
}

// attempt records a failed (or expired, or replayed) attempt the way the
// consumers and the reaper do: a job_attempts row. The reaper knows no
// consumer for an expired lease, so that one has none.
func (d *dataPlane) attempt(t *testing.T, jobID int64, n int, outcome, class, errText string) {
	t.Helper()
	var cls, txt, worker any
	if class != "" {
		cls, txt = class, errText
	}
	if outcome != "lease_expired" {
		worker = "worker-1"
	}
	if _, err := d.super.Exec(context.Background(), insertAttempt, jobID, n, worker,
		time.Now().Add(-25*time.Millisecond), outcome, cls, txt); err != nil {
		t.Fatal(err)
	}
}

const insertAttempt = `INSERT INTO webhook_ingress.job_attempts (job_id, event_received_at, attempt, worker_id, started_at, outcome, error_class, error)
	SELECT id, event_received_at, $2, $3, $4, $5, $6, $7 FROM webhook_ingress.jobs WHERE id = $1`

// complete records attempt n of job as successful the way a consumer does
// since 010_lease_token: no history row, the job row keeps it, under an id
// from job_attempts' sequence. The lease was taken 25ms before.
func (d *dataPlane) complete(t *testing.T, q interface {
	Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
}, jobID int64, n int) {
	t.Helper()
	if _, err := q.Exec(context.Background(), completeJob, jobID, n); err != nil {
		t.Fatal(err)
	}
}

const completeJob = `UPDATE webhook_ingress.jobs
	SET status = 'completed', attempt_count = $2, attempted_at = now() - interval '25 milliseconds',
	    completed_at = now(), completed_attempt_id = nextval('webhook_ingress.job_attempts_id_seq'),
	    worker_id = 'worker-1', lease_holder_id = NULL, lease_expires_at = NULL, updated_at = now()
	WHERE id = $1`

// attemptIDs are the ids of every finished attempt in the data plane, in
// both places.
func (d *dataPlane) attemptIDs(t *testing.T) []int64 {
	t.Helper()
	rows, err := d.super.Query(context.Background(), `SELECT id FROM webhook_ingress.job_attempts
		UNION ALL SELECT completed_attempt_id FROM webhook_ingress.jobs WHERE completed_attempt_id IS NOT NULL ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// startReporter runs a reporter as webhook_streamer against cp.
func startReporter(t *testing.T, d *dataPlane, cp *controlPlane, edit func(*reporter.Config)) *reporter.Reporter {
	t.Helper()
	ctx := context.Background()
	pool, err := database.Open(ctx, d.url, database.Options{Role: "webhook_streamer"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	cfg := reporter.Config{
		Pool: pool, URL: cp.url, Token: tenantToken, Key: []byte(hmacKey),
		BatchSize: 3, Interval: 30 * time.Millisecond, MinBackoff: 10 * time.Millisecond, MaxBackoff: 100 * time.Millisecond,
	}
	if edit != nil {
		edit(&cfg)
	}
	r, err := reporter.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Stop)
	return r
}

var allowedFields = []string{"attempt_id", "job", "outcome", "attempt", "duration_ms", "error_class", "started_at", "finished_at"}

func TestRecordsCarryOnlyTheAllowedFields(t *testing.T) {
	t.Parallel()
	d, cp := newDataPlane(t), newControlPlane(t)
	jobs := []int64{d.job(t), d.job(t), d.job(t)}
	d.complete(t, d.super, jobs[0], 1)
	d.attempt(t, jobs[1], 1, "failed", "http_5xx", errorText)
	d.attempt(t, jobs[1], 2, "dead_letter", "http_5xx", errorText)
	d.attempt(t, jobs[2], 1, "lease_expired", "lease_expired", "")
	startReporter(t, d, cp, nil)
	rows := cp.waitStored(t, 4)

	for _, rec := range cp.sent(t) {
		for k := range rec {
			if !slices.Contains(allowedFields, k) {
				t.Errorf("a record carries field %q", k)
			}
		}
	}
	cp.mu.Lock()
	for _, b := range cp.bodies {
		for _, leak := range []string{"secret-error-text", "10.1.2.3", "hdr-value", "X-Secret-Header", "body-bytes", "delivery-", "github", "push", tenantToken, hmacKey} {
			if bytes.Contains(b, []byte(leak)) {
				t.Errorf("a report carries %q", leak)
			}
		}
	}
	cp.mu.Unlock()

	ids := d.attemptIDs(t)
	want := []struct {
		job           int64
		outcome, cls  string
		attemptNumber int
	}{{jobs[0], "completed", "", 1}, {jobs[1], "failed", "http_5xx", 1}, {jobs[1], "dead_letter", "http_5xx", 2}, {jobs[2], "lease_expired", "lease_expired", 1}}
	for i, r := range rows {
		w := want[i]
		if r.attemptID != ids[i] {
			t.Errorf("record %d: attempt id %d, want %d", i, r.attemptID, ids[i])
		}
		if r.job == strconv.FormatInt(w.job, 10) || r.job != reporter.OpaqueJobID([]byte(hmacKey), w.job) || len(r.job) != 64 {
			t.Errorf("record %d: job %q is not the opaque id of job %d", i, r.job, w.job)
		}
		cls := ""
		if r.errorClass != nil {
			cls = *r.errorClass
		}
		if r.outcome != w.outcome || cls != w.cls || r.attempt != w.attemptNumber {
			t.Errorf("record %d: %s/%q attempt %d, want %s/%q attempt %d", i, r.outcome, cls, r.attempt, w.outcome, w.cls, w.attemptNumber)
		}
		if r.provider != nil || r.evtType != nil {
			t.Errorf("record %d: provider/event type sent without opting in", i)
		}
		if r.durationMS < 20 || r.finishedAt.Before(r.startedAt) {
			t.Errorf("record %d: duration %.1fms from %s to %s", i, r.durationMS, r.startedAt, r.finishedAt)
		}
	}
}

func TestProviderAndDatabaseIDsOnlyWhenOptedIn(t *testing.T) {
	t.Parallel()
	d, cp := newDataPlane(t), newControlPlane(t)
	job := d.job(t)
	d.complete(t, d.super, job, 1)
	startReporter(t, d, cp, func(c *reporter.Config) { c.IncludeProvider, c.SendDatabaseIDs, c.Key = true, true, nil })
	rows := cp.waitStored(t, 1)
	r := rows[0]
	if r.job != strconv.FormatInt(job, 10) {
		t.Errorf("job %q, want the database id %d", r.job, job)
	}
	if r.provider == nil || *r.provider != "github" || r.evtType == nil || *r.evtType != "push" {
		t.Errorf("provider %v, event type %v; want github, push", r.provider, r.evtType)
	}
}

func TestNothingLostOrDuplicatedWhileTheControlPlaneIsDown(t *testing.T) {
	t.Parallel()
	d, cp := newDataPlane(t), newControlPlane(t)
	cp.down.Store(true) // down before the reporter even has its cursor
	for range 4 {
		d.complete(t, d.super, d.job(t), 1)
	}
	rep := startReporter(t, d, cp, nil)
	cp.waitRequests(t, "two requests dropped while down (tried, then retried)", &cp.refused, 0, 2)
	if n := len(cp.rows(t)); n != 0 {
		t.Fatalf("%d records stored while down", n)
	}
	cp.down.Store(false)
	cp.waitStored(t, 4)

	// Down again mid-stream: the unacknowledged batches are sent once it is back.
	cp.down.Store(true)
	refused := cp.refused.Load()
	for range 5 {
		d.attempt(t, d.job(t), 1, "failed", "timeout", errorText)
	}
	cp.waitRequests(t, "two sends dropped while down again", &cp.refused, refused, 2)
	cp.down.Store(false)
	cp.waitStored(t, 9)

	// A restarted reporter resumes at the control plane's cursor, looking
	// again at the ids just below it (an attempt that committed late may be
	// among them: review helper-97), which the control plane holds already
	// and stores once.
	rep.Stop()
	before := len(cp.sent(t))
	for range 2 {
		d.complete(t, d.super, d.job(t), 1)
	}
	startReporter(t, d, cp, nil)
	rows := cp.waitStored(t, 11)
	if again := len(cp.sent(t)) - before; again < 2 {
		t.Errorf("the restarted reporter sent %d records, want the 2 new ones and those below the cursor it looked at again", again)
	}
	var got []int64
	for _, r := range rows {
		got = append(got, r.attemptID)
	}
	if want := d.attemptIDs(t); !slices.Equal(got, want) {
		t.Fatalf("control plane holds attempts %v, data plane has %v", got, want)
	}
}

// An attempt whose transaction commits after a later attempt's (its id is
// lower) is still reported, though the cursor already passed it: a success
// on its job row and a failure's history row alike.
func TestLateCommittedAttemptIsReported(t *testing.T) {
	t.Parallel()
	d, cp := newDataPlane(t), newControlPlane(t)
	ctx := context.Background()
	slowDone, slowFailed, fastJob := d.job(t), d.job(t), d.job(t)
	startReporter(t, d, cp, nil)
	begin := func() pgx.Tx {
		tx, err := d.super.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = tx.Rollback(ctx) })
		return tx
	}
	txDone, txFailed := begin(), begin()
	d.complete(t, txDone, slowDone, 1)
	if _, err := txFailed.Exec(ctx, insertAttempt, slowFailed, 1, "w", time.Now(), "failed", "timeout", errorText); err != nil {
		t.Fatal(err)
	}
	d.complete(t, d.super, fastJob, 1)
	cp.waitStored(t, 1)
	// More rounds past the gaps: a later attempt reported while they are open.
	laterJob := d.job(t)
	d.complete(t, d.super, laterJob, 1)
	cp.waitStored(t, 2)
	for _, tx := range []pgx.Tx{txDone, txFailed} {
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	rows := cp.waitStored(t, 4)
	for i, want := range []struct {
		job     int64
		outcome string
	}{{slowDone, "completed"}, {slowFailed, "failed"}, {fastJob, "completed"}, {laterJob, "completed"}} {
		if rows[i].job != reporter.OpaqueJobID([]byte(hmacKey), want.job) || rows[i].outcome != want.outcome {
			t.Fatalf("record %d is %s of another job, want the %s attempt of job %d: %+v", i, rows[i].outcome, want.outcome, want.job, rows)
		}
	}
}

// A transaction holding a long run of attempt ids (a reaper pass of 1,000
// expired leases on each of two streamers, a replay of many dead letters)
// that commits after a later id was reported: the cursor passed the whole
// run, and every one of its attempts is still reported, once.
func TestLateCommittedLongRunIsReported(t *testing.T) {
	t.Parallel()
	d, cp := newDataPlane(t), newControlPlane(t)
	ctx := context.Background()
	slow, fast := d.job(t), d.job(t)
	startReporter(t, d, cp, func(c *reporter.Config) { c.BatchSize = 500 })
	tx, err := d.super.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(ctx) })
	if _, err := tx.Exec(ctx, `INSERT INTO webhook_ingress.job_attempts (job_id, event_received_at, attempt, worker_id, started_at, outcome, error_class)
		SELECT j.id, j.event_received_at, g, NULL, now(), 'lease_expired', 'lease_expired'
		FROM webhook_ingress.jobs j, generate_series(1, 1100) g WHERE j.id = $1`, slow); err != nil {
		t.Fatal(err)
	}
	d.complete(t, d.super, fast, 1)
	cp.waitStored(t, 1)
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	rows := cp.waitStored(t, 1101)
	var got []int64
	for _, r := range rows {
		got = append(got, r.attemptID)
	}
	if want := d.attemptIDs(t); !slices.Equal(got, want) {
		t.Fatalf("control plane holds %d attempts, data plane has %d: not the same ids", len(got), len(want))
	}
	if sent := len(cp.sent(t)); sent != len(rows) {
		t.Fatalf("%d records sent for %d attempts: some were sent twice", sent, len(rows))
	}
}

// A replay moves a job's success from its row into job_attempts under the
// same id: whether the reporter read it before the replay or after, it is
// reported once, and the second success after the replay is reported too.
func TestReplayedSuccessIsReportedOnce(t *testing.T) {
	t.Parallel()
	d, cp := newDataPlane(t), newControlPlane(t)
	ctx := context.Background()
	op, err := database.Open(ctx, d.url, database.Options{Role: "webhook_operator"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(op.Close)
	replay := func(job int64) {
		t.Helper()
		if res, err := admin.Replay(ctx, op, admin.ReplayRequest{JobID: job}); err != nil || res.Requeued != 1 {
			t.Fatalf("replay job %d: %+v, %v", job, res, err)
		}
	}

	// Replayed before the reporter ever looked: the success is read from
	// job_attempts.
	early := d.job(t)
	d.complete(t, d.super, early, 1)
	replay(early)
	d.complete(t, d.super, early, 1)
	startReporter(t, d, cp, nil)
	cp.waitStored(t, 3)

	// Read from the job row first, then replayed and completed again.
	late := d.job(t)
	d.complete(t, d.super, late, 1)
	cp.waitStored(t, 4)
	replay(late)
	d.complete(t, d.super, late, 1)
	cp.waitStored(t, 6)
	var rows []storedRow
	testwait.Consistently(t, 100*time.Millisecond, "six records: nothing more comes in a few more rounds", func() (bool, string) {
		rows = cp.rows(t)
		return len(rows) == 6, fmt.Sprintf("%d records", len(rows))
	})

	var got []string
	var ids []int64
	for _, r := range rows {
		job := "early"
		if r.job == reporter.OpaqueJobID([]byte(hmacKey), late) {
			job = "late"
		}
		got = append(got, fmt.Sprintf("%s:%s:%d", job, r.outcome, r.attempt))
		ids = append(ids, r.attemptID)
	}
	want := "early:completed:1 early:replayed:1 early:completed:1 late:completed:1 late:replayed:1 late:completed:1"
	if strings.Join(got, " ") != want {
		t.Fatalf("control plane holds %v, want %s", got, want)
	}
	if dataIDs := d.attemptIDs(t); !slices.Equal(ids, dataIDs) {
		t.Fatalf("control plane holds attempts %v, data plane has %v", ids, dataIDs)
	}
	if sent := len(cp.sent(t)); sent != len(rows) {
		t.Fatalf("%d records sent for %d attempts: one was sent twice", sent, len(rows))
	}
}

func TestBadTokenIsRetriedNotSkipped(t *testing.T) {
	t.Parallel()
	d, cp := newDataPlane(t), newControlPlane(t)
	d.complete(t, d.super, d.job(t), 1)
	startReporter(t, d, cp, func(c *reporter.Config) { c.Token = "not-the-tenant-token-000" })
	cp.waitRequests(t, "three requests with the bad token (tried, retried)", &cp.requests, 0, 3)
	if n := len(cp.rows(t)); n != 0 {
		t.Fatalf("%d records stored with a bad token", n)
	}
}

func TestRecordValidate(t *testing.T) {
	t.Parallel()
	now := time.Now()
	ok := reporter.Record{AttemptID: 1, Job: strings.Repeat("0", 64), Outcome: reporter.OutcomeCompleted, StartedAt: now, FinishedAt: now}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, o := range reporter.Outcomes() {
		r := ok
		r.Outcome = o
		if err := r.Validate(); err != nil {
			t.Errorf("outcome %s: %v", o, err)
		}
	}
	bad := ok
	bad.Job = "Job 42"
	if err := bad.Validate(); err == nil {
		t.Error("free text accepted as job id")
	}
}
