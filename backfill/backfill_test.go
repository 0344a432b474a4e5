package backfill_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inlet-dev/inlet/backfill"
	"github.com/inlet-dev/inlet/ingress"
	"github.com/inlet-dev/inlet/internal/database"
	"github.com/inlet-dev/inlet/internal/pgtest"
	"github.com/inlet-dev/inlet/schema"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

type testBundle struct {
	admin *pgxpool.Pool // superuser: assertions and subscriptions
	pool  *pgxpool.Pool // the ingress role's
	store *ingress.PGStore
	state string
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	admin, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admin.Close)
	// Backfill writes as ingress does, with ingress's least-privilege role.
	pool, err := database.Open(ctx, url, database.Options{Role: schema.IngressRole})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return &testBundle{admin: admin, pool: pool, store: ingress.NewPGStore(pool, nil), state: filepath.Join(t.TempDir(), "state", "backfill.json")}
}

func (b *testBundle) config(source, scheme string) backfill.Config {
	return backfill.Config{Source: source, Scheme: scheme, Store: b.store, DB: b.pool, StatePath: b.state,
		MaxRetries: 2, Backoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond}
}

func (b *testBundle) subscribe(t *testing.T, handler, provider string) {
	t.Helper()
	if _, err := b.admin.Exec(context.Background(),
		`INSERT INTO webhook_ingress.subscriptions (handler, provider_pattern) VALUES ($1, $2)`, handler, provider); err != nil {
		t.Fatal(err)
	}
}

type storedEvent struct {
	body     []byte
	typ      string
	verified bool
	headers  string
}

func (b *testBundle) events(t *testing.T, provider string) map[string]storedEvent {
	t.Helper()
	rows, err := b.admin.Query(context.Background(),
		`SELECT external_event_id, raw_body, event_type, signature_verified, headers::text FROM webhook_ingress.events WHERE provider = $1`, provider)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]storedEvent{}
	for rows.Next() {
		var id string
		var e storedEvent
		if err := rows.Scan(&id, &e.body, &e.typ, &e.verified, &e.headers); err != nil {
			t.Fatal(err)
		}
		out[id] = e
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func (b *testBundle) count(t *testing.T, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := b.admin.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// fakeStripe serves GET /v1/events as Stripe documents it: newest first,
// limit, starting_after, has_more, a list object whose data are events. The
// events are pretty-printed with odd spacing so re-marshalling would show.
type fakeStripe struct {
	t      *testing.T
	events [][]byte // newest first
	ids    []string
	limit  int // page size it serves (Stripe serves what limit asks; smaller here to get pages)

	mu          sync.Mutex
	requests    []string // starting_after of each request served with 200
	rateLimit   int      // answer this many first requests 429
	failAfter   int      // after this many pages, answer 500 forever (0: never)
	pagesServed int
}

func newFakeStripe(t *testing.T, n, pageSize int) *fakeStripe {
	f := &fakeStripe{t: t, limit: pageSize}
	for i := n; i >= 1; i-- {
		id := fmt.Sprintf("evt_%04d", i)
		f.ids = append(f.ids, id)
		f.events = append(f.events, fmt.Appendf(nil, "{\n    \"id\": %q,\n    \"object\":  \"event\",\n    \"type\": \"invoice.paid\",\n    \"created\": %d,\n    \"data\": {\"object\": {\"amount\": %d.50, \"note\": \"caf\\u00e9 \\/ <b>\"}}\n  }", id, 1700000000+i, i))
	}
	return f
}

func (f *fakeStripe) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/v1/events" || r.Method != http.MethodGet {
		http.NotFound(w, r)
		return
	}
	if r.Header.Get("Authorization") != "Bearer sk_test_backfill" {
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	if r.URL.Query().Get("limit") != "100" {
		f.t.Errorf("limit = %q, want 100", r.URL.Query().Get("limit"))
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.rateLimit > 0 {
		f.rateLimit--
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusTooManyRequests)
		return
	}
	if f.failAfter > 0 && f.pagesServed >= f.failAfter {
		w.WriteHeader(http.StatusInternalServerError)
		return
	}
	after := r.URL.Query().Get("starting_after")
	start := 0
	if after != "" {
		start = -1
		for i, id := range f.ids {
			if id == after {
				start = i + 1
			}
		}
		if start < 0 {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
	}
	end := min(start+f.limit, len(f.events))
	var buf bytes.Buffer
	buf.WriteString("{\n  \"object\": \"list\",\n  \"data\": [\n  ")
	for i := start; i < end; i++ {
		if i > start {
			buf.WriteString(",\n  ")
		}
		buf.Write(f.events[i])
	}
	fmt.Fprintf(&buf, "\n  ],\n  \"has_more\": %t,\n  \"url\": \"/v1/events\"\n}", end < len(f.events))
	f.requests = append(f.requests, after)
	f.pagesServed++
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(buf.Bytes())
}

func (f *fakeStripe) served() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.requests...)
}

func stripeLister(t *testing.T, url string) backfill.Lister {
	t.Helper()
	l, err := backfill.NewStripe(backfill.StripeConfig{APIKey: "sk_test_backfill", BaseURL: url})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestStripeStoresExactBytesFansOutAndDedupes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.subscribe(t, "billing", "stripe")
	fake := newFakeStripe(t, 7, 3) // pages of 3, 3, 1
	fake.rateLimit = 1
	srv := httptest.NewServer(fake)
	defer srv.Close()
	ctx := context.Background()

	// evt_0003 arrived by webhook before the backfill.
	stored, err := b.store.Insert(ctx, &ingress.Event{Provider: "stripe", Scheme: "stripe", ExternalID: "evt_0003",
		EventType: "invoice.paid", RawBody: []byte(`{"id":"evt_0003"}`), Headers: map[string][]string{}, Verified: true})
	if err != nil || !stored {
		t.Fatalf("webhook insert: %v %v", stored, err)
	}

	var progress bytes.Buffer
	cfg := b.config("stripe", "stripe")
	cfg.Progress = &progress
	start := time.Now()
	stats, err := backfill.Run(ctx, cfg, stripeLister(t, srv.URL))
	if err != nil {
		t.Fatal(err)
	}
	if waited := time.Since(start); waited < time.Second {
		t.Errorf("Retry-After: 1 was not waited out (run took %s)", waited)
	}
	want := backfill.Stats{Pages: 3, Seen: 7, Stored: 6, Duplicates: 1, RateLimitWaits: 1}
	if stats != want {
		t.Fatalf("stats = %+v, want %+v", stats, want)
	}
	if got := fake.served(); strings.Join(got, ",") != ",evt_0005,evt_0002" {
		t.Errorf("pages requested with starting_after %q", got)
	}

	events := b.events(t, "stripe")
	if len(events) != 7 {
		t.Fatalf("%d events stored, want 7", len(events))
	}
	for i, id := range fake.ids {
		e := events[id]
		if id == "evt_0003" {
			if !e.verified || string(e.body) != `{"id":"evt_0003"}` {
				t.Errorf("the webhook's event was changed by the backfill: %+v", e)
			}
			continue
		}
		if !bytes.Equal(e.body, fake.events[i]) {
			t.Errorf("%s body:\n%s\nwant exactly\n%s", id, e.body, fake.events[i])
		}
		if e.verified || e.typ != "invoice.paid" || e.headers != `{"Inlet-Backfill": ["stripe-events-api"]}` {
			t.Errorf("%s: verified %v, type %q, headers %s", id, e.verified, e.typ, e.headers)
		}
	}
	if n := b.count(t, `SELECT count(*) FROM webhook_ingress.jobs WHERE handler = 'billing'`); n != 7 {
		t.Errorf("%d billing jobs, want 7 (one per event)", n)
	}
	if n := b.count(t, `SELECT count(*) FROM webhook_ingress.events WHERE secret_index IS NOT NULL AND NOT signature_verified`); n != 0 {
		t.Errorf("%d backfilled events name a secret", n)
	}
	if _, err := os.Stat(b.state); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("state file left after a finished run: %v", err)
	}

	// A second run reads the history again and stores nothing new.
	stats, err = backfill.Run(ctx, b.config("stripe", "stripe"), stripeLister(t, srv.URL))
	if err != nil {
		t.Fatal(err)
	}
	if stats.Stored != 0 || stats.Duplicates != 7 {
		t.Errorf("second run: %+v, want 0 stored, 7 duplicates", stats)
	}
	if n := b.count(t, `SELECT count(*) FROM webhook_ingress.jobs`); n != 7 {
		t.Errorf("%d jobs after the second run, want still 7", n)
	}
	if strings.Contains(progress.String(), "sk_test_backfill") {
		t.Error("the progress output shows the API key")
	}
}

func TestStripeResumesAfterInterruption(t *testing.T) {
	t.Parallel()
	b := setup(t)
	fake := newFakeStripe(t, 10, 2) // 5 pages
	fake.failAfter = 2
	srv := httptest.NewServer(fake)
	defer srv.Close()
	ctx := context.Background()

	stats, err := backfill.Run(ctx, b.config("stripe", "stripe"), stripeLister(t, srv.URL))
	if !errors.Is(err, backfill.ErrStatus) {
		t.Fatalf("run against a failing provider: %v, want ErrStatus", err)
	}
	if stats.Pages != 2 || stats.Stored != 4 || stats.Retries != 2 {
		t.Fatalf("interrupted run: %+v, want 2 pages, 4 stored, 2 retries", stats)
	}

	// A run with other parameters refuses the cursor.
	other, err := backfill.NewStripe(backfill.StripeConfig{APIKey: "sk_test_backfill", BaseURL: srv.URL, Types: []string{"charge.*"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := backfill.Run(ctx, b.config("stripe", "stripe"), other); !errors.Is(err, backfill.ErrStateMismatch) {
		t.Fatalf("run with other types: %v, want ErrStateMismatch", err)
	}

	fake.mu.Lock()
	fake.failAfter, fake.requests = 0, nil
	fake.mu.Unlock()
	stats, err = backfill.Run(ctx, b.config("stripe", "stripe"), stripeLister(t, srv.URL))
	if err != nil {
		t.Fatal(err)
	}
	if got := fake.served(); strings.Join(got, ",") != "evt_0007,evt_0005,evt_0003" {
		t.Errorf("resumed run requested starting_after %q, want only the 3 remaining pages", got)
	}
	if !stats.Resumed || stats.Pages != 5 || stats.Seen != 6 || stats.Stored != 6 || stats.Duplicates != 0 {
		t.Errorf("resumed run: %+v", stats)
	}
	if n := len(b.events(t, "stripe")); n != 10 {
		t.Errorf("%d events, want 10", n)
	}

	// Cancelled mid-way, then --restart: from the newest event again, all duplicates.
	fake.mu.Lock()
	fake.requests = nil
	fake.mu.Unlock()
	cfg := b.config("stripe", "stripe")
	cfg.Restart = true
	stats, err = backfill.Run(ctx, cfg, stripeLister(t, srv.URL))
	if err != nil || stats.Duplicates != 10 || len(fake.served()) != 5 {
		t.Errorf("restart: %+v %v, %d pages", stats, err, len(fake.served()))
	}
}

func TestStripeCancelKeepsCursor(t *testing.T) {
	t.Parallel()
	b := setup(t)
	fake := newFakeStripe(t, 6, 2)
	srv := httptest.NewServer(fake)
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cfg := b.config("stripe", "stripe")
	cfg.Store = &cancelAfter{Store: b.store, n: 3, cancel: cancel}
	if _, err := backfill.Run(ctx, cfg, stripeLister(t, srv.URL)); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled run: %v", err)
	}
	state, err := os.ReadFile(b.state)
	if err != nil || !strings.Contains(string(state), `"cursor": "evt_0005"`) {
		t.Fatalf("state after cancel: %s %v", state, err)
	}
	stats, err := backfill.Run(context.Background(), b.config("stripe", "stripe"), stripeLister(t, srv.URL))
	if err != nil || stats.Stored+stats.Duplicates != 4 {
		t.Fatalf("resume after cancel: %+v %v", stats, err)
	}
	if n := len(b.events(t, "stripe")); n != 6 {
		t.Errorf("%d events, want 6", n)
	}
}

// cancelAfter cancels the run's context at its nth insert (which fails).
type cancelAfter struct {
	ingress.Store
	n, calls int
	cancel   func()
}

func (c *cancelAfter) Insert(ctx context.Context, e *ingress.Event) (bool, error) {
	c.calls++
	if c.calls == c.n {
		c.cancel()
	}
	return c.Store.Insert(ctx, e)
}

// fakeGitHub serves a repository hook's deliveries as GitHub documents them:
// GET …/deliveries?per_page&cursor with a Link rel="next" cursor, and
// GET …/deliveries/{id} with request headers and payload.
type fakeGitHub struct {
	t          *testing.T
	deliveries []ghDelivery // newest first
	pageSize   int

	mu          sync.Mutex
	listCursors []string
	rateLimit   int
}

type ghDelivery struct {
	id      int64
	guid    string
	event   string
	payload string
}

const ghPath = "/repos/acme/widgets/hooks/42/deliveries"

func (f *fakeGitHub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Authorization") != "Bearer ghp_backfill" {
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.rateLimit > 0 {
		f.rateLimit--
		w.Header().Set("X-RateLimit-Remaining", "0")
		w.Header().Set("X-RateLimit-Reset", strconv.FormatInt(time.Now().Unix(), 10))
		w.WriteHeader(http.StatusForbidden)
		return
	}
	if r.URL.Path == ghPath {
		cursor := r.URL.Query().Get("cursor")
		f.listCursors = append(f.listCursors, cursor)
		start := 0
		if cursor != "" {
			start, _ = strconv.Atoi(strings.TrimPrefix(cursor, "v1_"))
		}
		end := min(start+f.pageSize, len(f.deliveries))
		var items []string
		for _, d := range f.deliveries[start:end] {
			items = append(items, fmt.Sprintf(`{"id":%d,"guid":%q,"delivered_at":"2026-11-30T10:00:00Z","redelivery":false,"status":"OK","status_code":200,"event":%q,"action":null}`, d.id, d.guid, d.event))
		}
		if end < len(f.deliveries) {
			w.Header().Set("Link", fmt.Sprintf(`<http://%s%s?per_page=100&cursor=v1_%d>; rel="next", <http://%s%s?per_page=100>; rel="first"`, r.Host, ghPath, end, r.Host, ghPath))
		}
		fmt.Fprintf(w, "[%s]", strings.Join(items, ","))
		return
	}
	id, err := strconv.ParseInt(strings.TrimPrefix(r.URL.Path, ghPath+"/"), 10, 64)
	for _, d := range f.deliveries {
		if err == nil && d.id == id {
			fmt.Fprintf(w, `{"id":%d,"guid":%q,"event":%q,"request":{"headers":{"Accept":"*/*","X-GitHub-Delivery":%q,"X-GitHub-Event":%q,"X-GitHub-Hook-ID":"42","X-Hub-Signature-256":"sha256=00"},"payload":%s},"response":{"headers":{},"payload":"ok"}}`,
				d.id, d.guid, d.event, d.guid, d.event, d.payload)
			return
		}
	}
	http.NotFound(w, r)
}

func TestGitHubDeliveries(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.subscribe(t, "ci", "git*")
	fake := &fakeGitHub{t: t, pageSize: 2, rateLimit: 1}
	for i := 5; i >= 1; i-- {
		fake.deliveries = append(fake.deliveries, ghDelivery{id: int64(1000 + i), guid: fmt.Sprintf("guid-%d", i),
			event: "push", payload: fmt.Sprintf(`{"ref": "refs/heads/main",  "n":%d, "s":"\u00e9"}`, i)})
	}
	// A redelivery of guid-2: the same event twice in the history.
	fake.deliveries = append(fake.deliveries[:2], append([]ghDelivery{{id: 2002, guid: "guid-2", event: "push", payload: `{"ref": "refs/heads/main",  "n":2, "s":"\u00e9"}`}}, fake.deliveries[2:]...)...)
	srv := httptest.NewServer(fake)
	defer srv.Close()
	l, err := backfill.NewGitHub(backfill.GitHubConfig{Token: "ghp_backfill", BaseURL: srv.URL, Repo: "acme/widgets", HookID: 42})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	stats, err := backfill.Run(ctx, b.config("github", "github"), l)
	if err != nil {
		t.Fatal(err)
	}
	want := backfill.Stats{Pages: 3, Seen: 6, Stored: 5, Duplicates: 1, RateLimitWaits: 1}
	if stats != want {
		t.Fatalf("stats = %+v, want %+v", stats, want)
	}
	if strings.Join(fake.listCursors, ",") != ",v1_2,v1_4" {
		t.Errorf("list cursors %q", fake.listCursors)
	}
	events := b.events(t, "github")
	for i := 1; i <= 5; i++ {
		e := events[fmt.Sprintf("guid-%d", i)]
		if want := fmt.Sprintf(`{"ref": "refs/heads/main",  "n":%d, "s":"\u00e9"}`, i); string(e.body) != want {
			t.Errorf("guid-%d body %q, want %q", i, e.body, want)
		}
		if e.typ != "push" || e.verified || strings.Contains(e.headers, "Signature") || !strings.Contains(e.headers, `"X-Github-Delivery": ["guid-`) {
			t.Errorf("guid-%d: %+v", i, e)
		}
	}
	if n := b.count(t, `SELECT count(*) FROM webhook_ingress.jobs WHERE handler = 'ci'`); n != 5 {
		t.Errorf("%d ci jobs, want 5", n)
	}
}
