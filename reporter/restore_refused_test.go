package reporter_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/inlet-dev/inlet/controlplane"
	"github.com/inlet-dev/inlet/internal/database"
	"github.com/inlet-dev/inlet/internal/pgtest"
	"github.com/inlet-dev/inlet/internal/testwait"
	"github.com/inlet-dev/inlet/reporter"
)

// backupDatabase makes a physical copy of the database at srcURL
// (CREATE DATABASE … TEMPLATE: what a base backup or a dump of that moment
// restores, sequences included) and returns its URL. srcURL must have no
// open session. The copy is dropped when the test ends.
func backupDatabase(t *testing.T, srcURL string) string {
	t.Helper()
	ctx := context.Background()
	u, err := url.Parse(srcURL)
	if err != nil {
		t.Fatal(err)
	}
	src := strings.TrimPrefix(u.Path, "/")
	dst := fmt.Sprintf("reporter_backup_%d_%d", os.Getpid(), time.Now().UnixNano())
	adm := *u
	adm.Path = "/postgres"
	conn, err := pgx.Connect(ctx, adm.String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err = conn.Exec(ctx, "CREATE DATABASE "+dst+" TEMPLATE "+src)
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond) // a closed pool's backends may take a moment to exit
	}
	if err != nil {
		t.Fatalf("copy the data plane (the backup): %v", err)
	}
	t.Cleanup(func() {
		c, err := pgx.Connect(context.Background(), adm.String())
		if err != nil {
			return
		}
		defer c.Close(context.Background())
		_, _ = c.Exec(context.Background(), "DROP DATABASE IF EXISTS "+dst+" WITH (FORCE)")
	})
	cp := *u
	cp.Path = "/" + dst
	return cp.String()
}

func openPool(t *testing.T, dsn string) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// TestRestoredDataPlaneAttemptsAreReported (review helper-260, fixed).
// Defect: after the data plane's database is restored from a backup (pg_dump
// or base backup / PITR: job_attempts_id_seq goes back with it), the attempts
// it finishes next draw attempt ids the control plane already holds from the
// lost timeline. The reporter resumes at the control plane's cursor
// (reporter/reporter.go: Reporter.run, fetchCursor = max(attempt_id),
// controlplane/queries.sql Cursor), so an id equal to the cursor is never
// read; ids below it are resent only through the restart lookback, and the
// control plane stores them with ON CONFLICT (tenant, attempt_id) DO NOTHING
// (controlplane/queries.sql InsertAttempts; answer 200 "stored":0), keeping
// the lost timeline's records. Every attempt of the restored data plane up to
// the old cursor is silently lost and its jobs show the outcome of jobs that,
// after the restore, never happened. doc.go: "every attempt is reported
// once"; docs/operations.md says nothing of restores. The same happens when a
// data plane is rebuilt on a fresh database with the same tenant token (every
// attempt up to the old cursor is lost).
// Setup: real PostgreSQL data plane + real control plane over HTTP. Job 1
// completed; a backup is taken (CREATE DATABASE … TEMPLATE); three more jobs
// complete and are reported (cursor 4). The data plane is restored from the
// backup; its reporter starts; then three jobs are dead-lettered and one more
// completes there.
// Expected: the control plane shows the restored data plane's three dead
// letters (whatever ids they were given).
// Observed: the restored data plane's completion (id 5) is stored, its three
// dead letters (ids 2, 3, 4) are not: 0 dead_letter records; the control
// plane holds ids 1-5 all "completed" and its page shows 0 dead letters.
// Fixed: whenever the reporter fetches the cursor (at start), and in every
// round that finds nothing after its cursor, it calls
// webhook_ingress.reporter_advance_attempt_ids(cursor) (migration 072, a
// SECURITY DEFINER function granted to webhook_streamer), which moves
// job_attempts' id sequence (the one every record id comes from) past the
// cursor when it is behind, never lowering it, and the reporter logs both
// figures at warn; docs/operations.md says what a restore does.
func TestRestoredDataPlaneAttemptsAreReported(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d, cp := newDataPlane(t), newControlPlane(t)
	d.complete(t, d.super, d.job(t), 1)

	// The backup: the data plane as it is now (attempt id 1 used).
	d.super.Close()
	backupURL := backupDatabase(t, d.url)
	d.super = openPool(t, d.url)

	rep := startReporter(t, d, cp, nil)
	for range 3 {
		d.complete(t, d.super, d.job(t), 1)
	}
	cp.waitStored(t, 4) // attempts 1..4 of the lost timeline; cursor 4
	rep.Stop()

	// The disaster: the data plane is restored from the backup and starts again.
	restored := &dataPlane{url: backupURL, super: openPool(t, backupURL), n: d.n}
	before := cp.requests.Load()
	startReporter(t, restored, cp, nil)
	// The restored reporter has its cursor and has sent its restart lookback.
	cp.waitRequests(t, "the restored reporter's cursor and first report", &cp.requests, before, 2)

	var dead []int64
	for range 3 {
		j := restored.job(t)
		dead = append(dead, j)
		restored.attempt(t, j, 1, "dead_letter", "http_5xx", errorText)
	}
	done := restored.job(t)
	restored.complete(t, restored.super, done, 1)
	var ids []int64
	if err := restored.super.QueryRow(ctx, `SELECT array_agg(id ORDER BY id) FROM webhook_ingress.job_attempts`).Scan(&ids); err != nil {
		t.Fatal(err)
	}

	// The restored data plane's completion is past the old cursor: it is
	// reported, so the reporter is running.
	testwait.Eventually(t, 20*time.Second, "the restored data plane's completion stored", func() (bool, string) {
		rows := cp.rows(t)
		for _, r := range rows {
			if r.job == reporter.OpaqueJobID([]byte(hmacKey), done) {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d records", len(rows))
	})
	deadLetters := func() (int, string) {
		var n int
		var seen []string
		for _, r := range cp.rows(t) {
			if r.outcome == "dead_letter" {
				n++
			}
			seen = append(seen, fmt.Sprintf("%d:%s", r.attemptID, r.outcome))
		}
		return n, strings.Join(seen, " ")
	}
	deadline := time.Now().Add(10 * time.Second) // ~300 reporter rounds at Interval 30ms
	for time.Now().Before(deadline) {
		if n, _ := deadLetters(); n >= 3 {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	n, seen := deadLetters()
	t.Fatalf("after a restore from backup the data plane dead-lettered jobs %v (attempt ids %v), but the control plane holds %d dead_letter records: %s",
		dead, ids, n, seen)
}

// staleControlPlane is the real control plane behind real HTTP,
// answering as a control plane of an earlier release does to a record
// carrying an error class that release does not know: 400 with the reason
// its decodeBatch gives (Record.Validate against its consumers.Classes()).
type staleControlPlane struct {
	*controlPlane
	posts, refused atomic.Int64
}

func newStaleControlPlane(t *testing.T, unknownClass string) *staleControlPlane {
	t.Helper()
	s := &staleControlPlane{}
	s.controlPlane = frontedControlPlane(t, func(w http.ResponseWriter, b []byte) bool {
		s.posts.Add(1)
		if !bytes.Contains(b, []byte(`"error_class":"`+unknownClass+`"`)) {
			return false
		}
		s.refused.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = io.WriteString(w, `{"error":"records[0]: invalid record: error_class: must be one of [handler_error timeout panic permanent http_4xx http_5xx network event_missing lease_expired]"}`+"\n")
		return true
	})
	return s
}

// frontedControlPlane is the real control plane on a new database behind
// real HTTP, with a front that sees each POST's body first: answer answers
// it itself (and returns true) or leaves it to the control plane.
func frontedControlPlane(t *testing.T, answer func(w http.ResponseWriter, body []byte) bool) *controlPlane {
	t.Helper()
	ctx := context.Background()
	pool := openPool(t, pgtest.NewEmptyDatabase(t))
	if _, err := controlplane.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	srv, err := controlplane.New(controlplane.Config{Pool: pool, Tenants: []controlplane.Tenant{{Name: "acme", Token: tenantToken}}})
	if err != nil {
		t.Fatal(err)
	}
	cp := &controlPlane{pool: pool}
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			b, _ := io.ReadAll(r.Body)
			if answer(w, b) {
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(b))
		}
		srv.ServeHTTP(w, r)
	}))
	t.Cleanup(hs.Close)
	cp.url = hs.URL
	return cp
}

// TestOneRefusedRecordDoesNotStopAllReporting (review helper-260, fixed).
// Defect: a control plane that refuses one record with 400 stops the whole
// report for good. Reporter.run (reporter/reporter.go) retries the same batch
// through Reporter.retry for every non-2xx answer, 400 included, and never
// moves the cursor; every attempt finished after it is never sent, with only
// a "send failed, retrying" warning per try. The ordinary way to get such a
// 400 is version skew: the control plane is a separate service (often
// another party's) and validates records with its own release's
// consumers.Classes(); the data plane's SDK added class "transaction"
// (commit f5218eb), which a control plane of an earlier release refuses.
// record.go even folds unknown classes to handler_error "which every control
// plane accepts", but only for classes outside the reporter's own list. The
// control plane's 400 names the record (records[i]) and says a resend cannot
// help; nothing is done with it.
// Setup: real data plane, the real control plane behind real HTTP answering
// 400 to a record of class "transaction" (as a control plane before f5218eb
// does). One attempt fails with class "transaction" (TxFunc's own class),
// then two jobs complete.
// Expected: the two completions (and the failed attempt, as handler_error or
// without a class) reach the control plane; at worst the one refused record
// is set aside and logged by id.
// Observed: 0 records stored after 3s; the same batch POSTed again and again
// (e.g. 30+ POSTs, all 400); the cursor stays at 0 for ever.
// Fixed: a 400, 413 or 422 is not retried as is (Reporter.deliver): the
// batch is narrowed down to the refused record (the records[i] the answer
// names, else by halves), which is sent once more alone with its values
// folded (class -> handler_error, provider and event type dropped) and, if
// refused again, skipped (logged by attempt id, counted in
// failures_total{step="refused"}); the rest of the batch is sent and the
// cursor moves on. 5xx and network errors are retried as before.
func TestOneRefusedRecordDoesNotStopAllReporting(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := newDataPlane(t)
	cp := newStaleControlPlane(t, "transaction")
	worker, err := database.Open(ctx, d.url, database.Options{Role: "webhook_worker"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(worker.Close)
	failed := d.job(t)
	if _, err := worker.Exec(ctx, insertAttempt, failed, 1, "worker-1", time.Now().Add(-25*time.Millisecond), "failed", "transaction", errorText); err != nil {
		t.Fatal(err)
	}
	later := []int64{d.job(t), d.job(t)}
	for _, j := range later {
		d.complete(t, d.super, j, 1)
	}
	startReporter(t, d, cp.controlPlane, func(c *reporter.Config) { c.Logger = slog.New(slog.DiscardHandler) })

	// The batch is refused (the reporter has had its chance to react to the
	// 400). The review waited for 3 refusals; the fix meets one: the record
	// named is sent again folded, which this control plane takes.
	testwait.Eventually(t, 20*time.Second, "the control plane refused the batch", func() (bool, string) {
		return cp.refused.Load() >= 1, fmt.Sprintf("%d refused", cp.refused.Load())
	})
	var got []string
	deadline := time.Now().Add(3 * time.Second) // ~100 reporter rounds at Interval 30ms, MaxBackoff 100ms
	for time.Now().Before(deadline) {
		got = got[:0]
		for _, r := range cp.rows(t) {
			got = append(got, fmt.Sprintf("%d:%s", r.attemptID, r.outcome))
		}
		sort.Strings(got)
		completed := 0
		for _, g := range got {
			if strings.HasSuffix(g, ":completed") {
				completed++
			}
		}
		if completed >= len(later) {
			// The refused record itself is reported too, folded: the class
			// every control plane takes, never skipped for this.
			for _, r := range cp.rows(t) {
				if r.job == reporter.OpaqueJobID([]byte(hmacKey), failed) {
					if r.outcome != "failed" || r.errorClass == nil || *r.errorClass != "handler_error" {
						t.Errorf("the refused record stored as %s class %v, want failed, handler_error", r.outcome, r.errorClass)
					}
					return
				}
			}
			t.Fatalf("the completions are stored, the refused record (job %d) is not, though folded it is valid to any control plane: %v", failed, got)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("the control plane refused one record (class %q) and the reporter never sent anything else: %d POSTs, %d answered 400; "+
		"control plane holds %d records %v, data plane has attempts %v",
		"transaction", cp.posts.Load(), cp.refused.Load(), len(got), got, d.attemptIDs(t))
}

// A data plane rebuilt on a new database under the tenant token of one the
// control plane already holds records of (every id up to its cursor) has
// its attempt ids moved past that cursor when its reporter starts, says so
// at warn with both figures, and each of its attempts is reported.
func TestNewDatabaseUnderTheSameTokenAttemptsAreReported(t *testing.T) {
	t.Parallel()
	old, cp := newDataPlane(t), newControlPlane(t)
	rep := startReporter(t, old, cp, nil)
	for range 4 {
		old.complete(t, old.super, old.job(t), 1)
	}
	cp.waitStored(t, 4) // cursor 4
	rep.Stop()

	fresh := newDataPlane(t)
	var logs reviewBuf
	startReporter(t, fresh, cp, func(c *reporter.Config) { c.Logger = slog.New(slog.NewTextHandler(&logs, nil)) })
	// Nothing to send yet: the reporter has its cursor once it says so.
	testwait.Eventually(t, 20*time.Second, "the reporter started at the cursor 4", func() (bool, string) {
		out := logs.String()
		return strings.Contains(out, "reporter started") && strings.Contains(out, "cursor=4"), out
	})
	for range 3 {
		fresh.attempt(t, fresh.job(t), 1, "dead_letter", "http_5xx", errorText)
	}
	fresh.complete(t, fresh.super, fresh.job(t), 1)

	rows := cp.waitStored(t, 8)
	outcomes := map[string]int{}
	for _, r := range rows[4:] {
		outcomes[r.outcome]++
	}
	if outcomes["dead_letter"] != 3 || outcomes["completed"] != 1 {
		t.Errorf("the new data plane's records: %v, want 3 dead_letter and 1 completed", outcomes)
	}
	if ids := fresh.attemptIDs(t); len(ids) != 4 || ids[0] != 5 {
		t.Errorf("the new data plane's attempt ids %v: want 4 ids from 5 (past the cursor 4)", ids)
	}
	if out := logs.String(); !strings.Contains(out, "level=WARN") || !strings.Contains(out, "last_attempt_id=0 cursor=4") {
		t.Errorf("no warning naming the sequence's last id (0) and the cursor (4):\n%s", out)
	}
}

// A database restored under a running reporter (PITR in place: the pool's
// connections come back to a sequence behind the reporter's cursor) has its
// attempt ids moved past the cursor by the reporter's next round that finds
// nothing after the cursor, without a restart; the attempts after that are
// reported.
func TestRestoredUnderARunningReporterAttemptsAreReported(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d, cp := newDataPlane(t), newControlPlane(t)
	startReporter(t, d, cp, nil)
	for range 4 {
		d.complete(t, d.super, d.job(t), 1)
	}
	cp.waitStored(t, 4) // cursor 4

	// The restore, as far as the sequence goes: back to the backup's id 1.
	if _, err := d.super.Exec(ctx, `SELECT setval('webhook_ingress.job_attempts_id_seq', 1)`); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, 20*time.Second, "the sequence moved past the cursor 4", func() (bool, string) {
		var last int64
		if err := d.super.QueryRow(ctx, `SELECT last_value FROM webhook_ingress.job_attempts_id_seq`).Scan(&last); err != nil {
			t.Fatal(err)
		}
		return last >= 4, fmt.Sprintf("last_value %d", last)
	})
	for range 3 {
		d.attempt(t, d.job(t), 1, "dead_letter", "http_5xx", errorText)
	}
	rows := cp.waitStored(t, 7)
	for _, r := range rows[4:] {
		if r.outcome != "dead_letter" || r.attemptID <= 4 {
			t.Errorf("record %d %s after the restore: want dead_letter past the cursor 4", r.attemptID, r.outcome)
		}
	}
}

// refusingControlPlane is the real control plane behind real HTTP that
// refuses, with status, every batch carrying a record of job poison, as a
// control plane refuses a record it cannot take however it is sent; its
// reason names the record (records[i]) only when named.
type refusingControlPlane struct {
	*controlPlane
	posts atomic.Int64
}

func newRefusingControlPlane(t *testing.T, poison string, status int, named bool) *refusingControlPlane {
	t.Helper()
	s := &refusingControlPlane{}
	s.controlPlane = frontedControlPlane(t, func(w http.ResponseWriter, b []byte) bool {
		s.posts.Add(1)
		var batch reporter.Batch
		if err := json.Unmarshal(b, &batch); err != nil {
			t.Errorf("report body: %v", err)
		}
		for i, rec := range batch.Records {
			if rec.Job != poison {
				continue
			}
			reason := "body: refused"
			if named {
				reason = fmt.Sprintf("records[%d]: invalid record: job: refused", i)
			}
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			_ = json.NewEncoder(w).Encode(map[string]string{"error": reason})
			return true
		}
		return false
	})
	return s
}

// A record the control plane refuses even with its values folded is
// skipped, logged by attempt id (no value of it) and counted in
// failures_total{step="refused"}; every other record of its batch and after
// it is reported, whether the refusal names the record (records[i]), does
// not (the batch is halved down to it), or is a 413.
func TestRefusedRecordIsSkippedAndCounted(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		status int
		named  bool
	}{
		{"400 naming the record", http.StatusBadRequest, true},
		{"400 naming no record", http.StatusBadRequest, false},
		{"413", http.StatusRequestEntityTooLarge, false},
		{"422", http.StatusUnprocessableEntity, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := newDataPlane(t)
			var jobs []int64
			for range 6 {
				jobs = append(jobs, d.job(t))
			}
			poison := jobs[2]
			cp := newRefusingControlPlane(t, reporter.OpaqueJobID([]byte(hmacKey), poison), tc.status, tc.named)
			for _, j := range jobs {
				if j == poison {
					d.attempt(t, j, 1, "failed", "http_5xx", errorText)
					continue
				}
				d.complete(t, d.super, j, 1)
			}
			reg := prometheus.NewRegistry()
			var logs reviewBuf
			startReporter(t, d, cp.controlPlane, func(c *reporter.Config) {
				c.BatchSize, c.Metrics = 5, reg
				c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
			})
			cp.waitStored(t, 5)
			later := d.job(t)
			d.complete(t, d.super, later, 1) // after the refused record: the cursor moved on
			rows := cp.waitStored(t, 6)
			for _, r := range rows {
				if r.job == reporter.OpaqueJobID([]byte(hmacKey), poison) || r.outcome != "completed" {
					t.Errorf("stored record %d %s: want only the completions", r.attemptID, r.outcome)
				}
			}
			if n := metricValue(t, reg, "inlet_reporter_failures_total", "refused"); n != 1 {
				t.Errorf("failures_total{step=refused} = %v, want 1", n)
			}
			if n := metricValue(t, reg, "inlet_reporter_failures_total", "send"); n != 0 {
				t.Errorf("failures_total{step=send} = %v: a refusal is not a failure to retry", n)
			}
			if n := cp.posts.Load(); n > 12 {
				t.Errorf("%d POSTs for 7 records, one refused: want the refusal narrowed down, not retried", n)
			}
			var ids []int64
			if err := d.super.QueryRow(context.Background(), `SELECT array_agg(id) FROM webhook_ingress.job_attempts`).Scan(&ids); err != nil || len(ids) != 1 {
				t.Fatalf("the refused attempt's id: %v, %v", ids, err)
			}
			out := logs.String()
			if !strings.Contains(out, "skipped") || !strings.Contains(out, fmt.Sprintf("attempt_id=%d", ids[0])) {
				t.Errorf("the skipped record is not logged by its attempt id %d:\n%s", ids[0], out)
			}
			if strings.Contains(out, "secret-error-text") || strings.Contains(out, reporter.OpaqueJobID([]byte(hmacKey), poison)) {
				t.Errorf("the log carries a value of the refused record:\n%s", out)
			}
		})
	}
}

// A cursor further ahead than any restore rewinds (2^32 ids and more) is not
// followed: whoever holds the tenant's token can store a record of any id,
// and a control plane can answer any cursor, and moving the data plane's
// attempt ids there would push them towards the sequence's end (every
// failure and completion of the customer's pipeline then fails). The
// reporter says so once, at error, and delivery's ids stay as they were.
func TestCursorFarAheadDoesNotMoveTheDataPlanesIDs(t *testing.T) {
	t.Parallel()
	d, cp := newDataPlane(t), newControlPlane(t)
	far := int64(1) << 40
	if _, err := cp.pool.Exec(context.Background(), `INSERT INTO control_plane.attempts
		(tenant, attempt_id, job, outcome, attempt, duration_ms, started_at, finished_at)
		VALUES ('acme', $1, 'j', 'completed', 1, 1, now(), now())`, far); err != nil {
		t.Fatal(err)
	}
	var logs reviewBuf
	startReporter(t, d, cp, func(c *reporter.Config) { c.Logger = slog.New(slog.NewTextHandler(&logs, nil)) })
	testwait.Eventually(t, 20*time.Second, "the reporter refused to follow the cursor", func() (bool, string) {
		out := logs.String()
		return strings.Contains(out, "level=ERROR") && strings.Contains(out, "further ahead"), out
	})
	d.complete(t, d.super, d.job(t), 1)
	if ids := d.attemptIDs(t); len(ids) != 1 || ids[0] >= far {
		t.Errorf("the data plane's attempt ids %v after a cursor at %d: want one small id (the sequence not moved)", ids, far)
	}
	if n := strings.Count(logs.String(), "further ahead"); n != 1 {
		t.Errorf("the refusal logged %d times, want once", n)
	}
}

// A proxy or firewall in front of the control plane that refuses every
// report with a 400 naming no record (not the control plane's own refusal,
// which names records[i]) costs at most one record: with nothing taken
// since, the next lone record is not skipped but sent again, as any
// failure, until the proxy lets reports through; then the rest are stored.
func TestProxyRefusingEverythingSkipsAtMostOneRecord(t *testing.T) {
	t.Parallel()
	d, cp := newDataPlane(t), newControlPlane(t)
	target, err := url.Parse(cp.url)
	if err != nil {
		t.Fatal(err)
	}
	var refuse atomic.Bool
	var refused atomic.Int64
	refuse.Store(true)
	proxy := httputil.NewSingleHostReverseProxy(target)
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && refuse.Load() {
			refused.Add(1)
			http.Error(w, "400 Bad Request", http.StatusBadRequest)
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(front.Close)
	for range 4 {
		d.complete(t, d.super, d.job(t), 1)
	}
	reg := prometheus.NewRegistry()
	startReporter(t, d, &controlPlane{pool: cp.pool, url: front.URL}, func(c *reporter.Config) { c.Metrics = reg })
	testwait.Eventually(t, 30*time.Second, "the reporter kept sending while every report was refused", func() (bool, string) {
		n := refused.Load()
		return n >= 20, fmt.Sprintf("%d refused", n)
	})
	if n := metricValue(t, reg, "inlet_reporter_failures_total", "refused"); n > 1 {
		t.Errorf("failures_total{step=refused} = %v while a proxy refused everything: want at most one record skipped", n)
	}
	skipped := int(metricValue(t, reg, "inlet_reporter_failures_total", "refused"))
	refuse.Store(false)
	cp.waitStored(t, 4-skipped)
}
