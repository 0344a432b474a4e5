package controlplane_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inlet-dev/inlet/consumers"
	"github.com/inlet-dev/inlet/controlplane"
	"github.com/inlet-dev/inlet/internal/pgtest"
	"github.com/inlet-dev/inlet/reporter"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

const (
	tokenA = "tenant-a-token-0123456789"
	tokenB = "tenant-b-token-0123456789"
)

type testBundle struct {
	pool *pgxpool.Pool
	url  string
}

func setup(t *testing.T) *testBundle {
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
	srv, err := controlplane.New(controlplane.Config{Pool: pool, Tenants: []controlplane.Tenant{
		{Name: "alpha", Token: tokenA}, {Name: "beta", Token: tokenB},
	}})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	return &testBundle{pool: pool, url: hs.URL}
}

func record(id int64, outcome reporter.Outcome, class string) reporter.Record {
	start := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC).Add(time.Duration(id) * time.Second)
	return reporter.Record{
		AttemptID: id, Job: reporter.OpaqueJobID([]byte("test-key-0123456789"), id%3+1), Outcome: outcome,
		Attempt: 1, DurationMS: float64(id * 10), ErrorClass: consumers.ErrorClass(class),
		StartedAt: start, FinishedAt: start.Add(time.Duration(id*10) * time.Millisecond),
	}
}

func (b *testBundle) do(t *testing.T, method, path, token string, body []byte) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, b.url+path, bytes.NewReader(body))
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(out)
}

func (b *testBundle) post(t *testing.T, token string, recs ...reporter.Record) (int, string) {
	t.Helper()
	body, err := json.Marshal(reporter.Batch{Records: recs})
	if err != nil {
		t.Fatal(err)
	}
	return b.do(t, http.MethodPost, "/api/v1/reports", token, body)
}

func (b *testBundle) cursor(t *testing.T, token string) int64 {
	t.Helper()
	code, body := b.do(t, http.MethodGet, "/api/v1/cursor", token, nil)
	if code != 200 {
		t.Fatalf("cursor: %d %s", code, body)
	}
	var c reporter.Cursor
	if err := json.Unmarshal([]byte(body), &c); err != nil {
		t.Fatal(err)
	}
	return c.AttemptID
}

func (b *testBundle) page(t *testing.T, user, pass string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, b.url+"/", nil)
	req.SetBasicAuth(user, pass)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(out)
}

func TestReportsAreStoredIdempotentlyAndAdvanceTheCursor(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if c := b.cursor(t, tokenA); c != 0 {
		t.Fatalf("cursor of a new tenant = %d, want 0", c)
	}
	recs := []reporter.Record{record(1, reporter.OutcomeFailed, "http_5xx"), record(2, reporter.OutcomeCompleted, ""), record(5, reporter.OutcomeCompleted, "")}
	for range 2 { // the second is a resend after a lost answer
		if code, body := b.post(t, tokenA, recs...); code != 200 {
			t.Fatalf("post: %d %s", code, body)
		}
	}
	var n int
	if err := b.pool.QueryRow(context.Background(), `SELECT count(*) FROM control_plane.attempts WHERE tenant = 'alpha'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 3 {
		t.Fatalf("%d rows after a batch sent twice, want 3", n)
	}
	if c := b.cursor(t, tokenA); c != 5 {
		t.Fatalf("cursor = %d, want 5", c)
	}
	if code, body := b.post(t, tokenA, []reporter.Record{}...); code != 200 {
		t.Fatalf("empty batch: %d %s", code, body)
	}
}

func TestBadTokenIs401(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, tok := range []string{"", "not-a-tenant-token-xyz", tokenA + "x"} {
		if code, _ := b.post(t, tok, record(1, reporter.OutcomeCompleted, "")); code != 401 {
			t.Errorf("POST with token %q: %d, want 401", tok, code)
		}
		if code, _ := b.do(t, http.MethodGet, "/api/v1/cursor", tok, nil); code != 401 {
			t.Errorf("GET cursor with token %q: %d, want 401", tok, code)
		}
	}
	for _, c := range []struct{ user, pass string }{{"alpha", "wrong-password-123456"}, {"beta", tokenA}, {"", tokenA}, {"alpha", ""}} {
		if code, _ := b.page(t, c.user, c.pass); code != 401 {
			t.Errorf("page as %q/%q: %d, want 401", c.user, c.pass, code)
		}
	}
	var n int
	if err := b.pool.QueryRow(context.Background(), `SELECT count(*) FROM control_plane.attempts`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d rows stored without a valid token (%v)", n, err)
	}
}

func TestInvalidRecordsAre400WithAReason(t *testing.T) {
	t.Parallel()
	b := setup(t)
	good := `{"attempt_id":7,"job":"` + strings.Repeat("a", 64) + `","outcome":"completed","attempt":1,"duration_ms":3.5,` +
		`"started_at":"2026-12-01T10:00:00Z","finished_at":"2026-12-01T10:00:01Z"}`
	if code, body := b.do(t, http.MethodPost, "/api/v1/reports", tokenA, []byte(`{"records":[`+good+`]}`)); code != 200 {
		t.Fatalf("valid record: %d %s", code, body)
	}
	with := func(from, to string) string { return `{"records":[` + strings.Replace(good, from, to, 1) + `]}` }
	many := make([]string, reporter.MaxBatch+1)
	for i := range many {
		many[i] = strings.Replace(good, `"attempt_id":7`, fmt.Sprintf(`"attempt_id":%d`, i+1), 1)
	}
	for _, c := range []struct{ name, body, reason string }{
		{"unknown field", with(`"attempt":1`, `"attempt":1,"body":"secret"`), "unknown field"},
		{"unknown top-level field", `{"records":[],"headers":{"a":"b"}}`, "unknown field"},
		{"outcome outside the list", with(`"completed"`, `"exploded"`), "outcome"},
		{"error class outside the list", with(`"attempt":1`, `"attempt":1,"error_class":"connection refused to 10.0.0.1"`), "error_class"},
		{"free text as job", with(strings.Repeat("a", 64), "customer@example.com"), "job"},
		{"provider not a source name", with(`"attempt":1`, `"attempt":1,"provider":"Stripe Inc."`), "provider"},
		{"event type with spaces", with(`"attempt":1`, `"attempt":1,"event_type":"a b"`), "event_type"},
		{"non-positive attempt id", with(`"attempt_id":7`, `"attempt_id":0`), "attempt_id"},
		{"negative duration", with(`3.5`, `-1`), "duration_ms"},
		{"finished before started", with(`10:00:01Z`, `09:00:00Z`), "finished_at"},
		{"missing time", with(`,"finished_at":"2026-12-01T10:00:01Z"`, ``), "finished_at"},
		{"fractional attempt", with(`"attempt":1`, `"attempt":1.5`), "attempt"},
		{"no records", `{}`, "records"},
		{"not JSON", `records=1`, "body"},
		{"two values", `{"records":[]}{"records":[]}`, "body"},
		{"too many records", `{"records":[` + strings.Join(many, ",") + `]}`, "at most"},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, body := b.do(t, http.MethodPost, "/api/v1/reports", tokenA, []byte(c.body))
			if code != 400 || !strings.Contains(body, c.reason) {
				t.Fatalf("%d %s, want 400 naming %q", code, body, c.reason)
			}
		})
	}
	if c := b.cursor(t, tokenA); c != 7 {
		t.Fatalf("cursor = %d after refused batches, want 7", c)
	}
}

func TestTenantsNeverSeeEachOthersData(t *testing.T) {
	t.Parallel()
	b := setup(t)
	a := []reporter.Record{record(1, reporter.OutcomeFailed, "http_5xx"), record(2, reporter.OutcomeDeadLetter, "http_5xx"), record(3, reporter.OutcomeCompleted, "")}
	if code, body := b.post(t, tokenA, a...); code != 200 {
		t.Fatalf("post as alpha: %d %s", code, body)
	}
	// beta reports the same attempt ids: its own rows, not alpha's.
	bb := record(2, reporter.OutcomeCompleted, "")
	bb.Job = strings.Repeat("b", 64)
	if code, body := b.post(t, tokenB, bb); code != 200 {
		t.Fatalf("post as beta: %d %s", code, body)
	}
	if ca, cb := b.cursor(t, tokenA), b.cursor(t, tokenB); ca != 3 || cb != 2 {
		t.Fatalf("cursors alpha %d, beta %d; want 3 and 2", ca, cb)
	}
	code, pa := b.page(t, "alpha", tokenA)
	if code != 200 {
		t.Fatalf("alpha's page: %d", code)
	}
	for _, want := range []string{`id="tenant">alpha<`, `data-status="dead_letter">1<`, `data-status="completed">1<`, `data-status="failed">1<`, `data-class="http_5xx">2<`, `data-attempts="">3<`} {
		if !strings.Contains(pa, want) {
			t.Errorf("alpha's page lacks %s:\n%s", want, pa)
		}
	}
	if strings.Contains(pa, "beta") {
		t.Error("alpha's page names beta")
	}
	code, pb := b.page(t, "beta", tokenB)
	if code != 200 {
		t.Fatalf("beta's page: %d", code)
	}
	for _, want := range []string{`id="tenant">beta<`, `data-status="completed">1<`, `data-attempts="">1<`} {
		if !strings.Contains(pb, want) {
			t.Errorf("beta's page lacks %s:\n%s", want, pb)
		}
	}
	for _, leak := range []string{"alpha", "http_5xx", "dead_letter", "failed"} {
		if strings.Contains(pb, leak) {
			t.Errorf("beta's page shows %q, alpha's data", leak)
		}
	}
	if strings.Contains(pb, "<script") || strings.Contains(pa, "<script") {
		t.Error("the page has a script")
	}
}

func TestMigrateTwiceIsANoOp(t *testing.T) {
	t.Parallel()
	b := setup(t)
	applied, err := controlplane.Migrate(context.Background(), b.pool)
	if err != nil || len(applied) != 0 {
		t.Fatalf("second migrate applied %v (%v), want nothing", applied, err)
	}
}
