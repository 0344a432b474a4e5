package backfill

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inlet-dev/inlet/audit"
	"github.com/inlet-dev/inlet/ingress"
	"github.com/inlet-dev/inlet/internal/database"
	"github.com/inlet-dev/inlet/internal/pgtest"
	"github.com/inlet-dev/inlet/retention"
	"github.com/inlet-dev/inlet/schema"
)

// r296 is a throwaway database: the owner's pool (assertions, retention,
// the sealer) and ingress's write path on the ingress role, as inlet
// backfill writes.
type r296 struct {
	admin *pgxpool.Pool
	pool  *pgxpool.Pool
	store *ingress.PGStore
	state string
}

func r296Setup(t *testing.T) *r296 {
	t.Helper()
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	admin, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admin.Close)
	pool, err := database.Open(ctx, url, database.Options{Role: schema.IngressRole})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return &r296{admin: admin, pool: pool, store: ingress.NewPGStore(pool, nil),
		state: filepath.Join(t.TempDir(), "backfill-stripe.json")}
}

func (b *r296) exec(t *testing.T, sql string, args ...any) {
	t.Helper()
	if _, err := b.admin.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func (b *r296) count(t *testing.T, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := b.admin.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func (b *r296) config(source, scheme string) Config {
	return Config{Source: source, Scheme: scheme, Store: b.store, DB: b.pool, StatePath: b.state,
		MaxRetries: 2, Backoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond}
}

// r296Event is one event of the fake Stripe's list.
type r296Event struct {
	id, typ string
	created time.Time
}

func (e r296Event) json() string {
	return fmt.Sprintf(`{"id":%q,"object":"event","api_version":"2024-06-20","created":%d,"data":{"object":{"id":"in_1","object":"invoice"}},"livemode":false,"pending_webhooks":0,"request":{"id":null,"idempotency_key":null},"type":%q}`,
		e.id, e.created.Unix(), e.typ)
}

// r296Stripe serves GET /v1/events as Stripe does: newest first, limit,
// starting_after (the page after that event), created[gte]/[lte],
// has_more, a list object.
type r296Stripe struct {
	mu       sync.Mutex
	events   []r296Event // newest first
	pageSize int
	queries  []string
}

func (f *r296Stripe) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/v1/events" || !strings.HasPrefix(r.Header.Get("Authorization"), "Bearer sk_") {
		http.Error(w, `{"error":{"message":"no"}}`, http.StatusUnauthorized)
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.queries = append(f.queries, r.URL.RawQuery)
	q := r.URL.Query()
	var gte, lte int64 = 0, 1 << 62
	_, _ = fmt.Sscan(q.Get("created[gte]"), &gte)
	if v := q.Get("created[lte]"); v != "" {
		_, _ = fmt.Sscan(v, &lte)
	}
	var list []r296Event
	for _, e := range f.events {
		if c := e.created.Unix(); c >= gte && c <= lte {
			list = append(list, e)
		}
	}
	start := 0
	if after := q.Get("starting_after"); after != "" {
		start = -1
		for i, e := range list {
			if e.id == after {
				start = i + 1
			}
		}
		if start < 0 {
			http.Error(w, `{"error":{"message":"No such event"}}`, http.StatusBadRequest)
			return
		}
	}
	end := min(start+f.pageSize, len(list))
	data := make([]string, 0, end-start)
	for _, e := range list[start:end] {
		data = append(data, e.json())
	}
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"object":"list","data":[%s],"has_more":%t,"url":"/v1/events"}`, strings.Join(data, ","), end < len(list))
}

// r296DroppedLog gives b a log whose weekly partitions start three weeks
// back, holding a Stripe event delivered 15 days ago (handler billing
// completed it, sealed) whose period inlet retention (max_age 7d) then
// dropped with its dedupe key: as setupDroppedLog does for reconcile. It
// returns the event and the end of the newest dropped period.
func r296DroppedLog(t *testing.T, b *r296, now time.Time) (pruned r296Event, kept time.Time) {
	t.Helper()
	ctx := context.Background()
	b.exec(t, `SELECT webhook_ingress.drop_partition(period_start) FROM webhook_ingress.partitions()`)
	b.exec(t, `SELECT webhook_ingress.create_partitions('week', 2, now() - interval '21 days')`)
	b.exec(t, `INSERT INTO webhook_ingress.subscriptions (handler, provider_pattern) VALUES ('billing', 'stripe')`)
	pruned = r296Event{id: "evt_review296_pruned", typ: "invoice.paid", created: now.Add(-15 * 24 * time.Hour)}
	b.exec(t, `INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, event_type, headers, raw_body, signature_verified, received_at)
		VALUES ('stripe', 'stripe', $1, $2, '{"Stripe-Signature": ["t=1,v1=00"]}', convert_to($3, 'UTF8'), true, $4)`,
		pruned.id, pruned.typ, pruned.json(), pruned.created)
	b.exec(t, `UPDATE webhook_ingress.jobs SET status = 'completed', attempt_count = 1, attempted_at = now(), completed_at = now(),
		completed_attempt_id = nextval('webhook_ingress.job_attempts_id_seq'), worker_id = 'c1', updated_at = now()`)
	s, err := audit.NewSealer(audit.Config{DB: b.admin, Grace: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond) // past the sealer's 1 ms grace
	if _, err := s.Seal(ctx); err != nil && !errors.Is(err, audit.ErrNothingToSeal) {
		t.Fatal(err)
	}
	rep, err := retention.Run(ctx, b.admin, retention.Options{MaxAge: 7 * 24 * time.Hour, Interval: "week", Ahead: 2})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Dropped() == 0 || b.count(t, `SELECT count(*) FROM webhook_ingress.events`) != 0 ||
		b.count(t, `SELECT count(*) FROM webhook_ingress.event_keys`) != 0 {
		t.Fatalf("retention dropped %d periods; the event's period and its dedupe key must be gone first", rep.Dropped())
	}
	if err := b.admin.QueryRow(ctx, `SELECT max(period_end) FROM webhook_ingress.retention_log WHERE period_end <= dropped_at`).Scan(&kept); err != nil {
		t.Fatal(err)
	}
	if !kept.After(pruned.created) || !kept.Before(now) {
		t.Fatalf("the newest dropped period ends %s: want after the event (%s) and before now", kept, pruned.created)
	}
	return pruned, kept
}

// TestBackfillSkipsWhatRetentionDropped (review helper-296, fixed).
// Defect: `inlet backfill stripe` (the provider backfill, not reconcile)
// has no retention cut-off. Stripe lists 30 days of events; with
// retention.max_age under that (7d here), every event of a period inlet
// retention dropped (its row and its dedupe key gone) is taken for new,
// stored again under a new id, and given a new pending job per subscribed
// handler: handlers run weeks-old events a second time under a new job id,
// which the job-id idempotency key does not catch. This is the very defect
// review helper-272 found in reconcile and helper-277 fixed there only
// (RetentionDroppedThrough, Report.Skipped, ErrWindowDropped, migration
// 074); backfill.Run never reads retention_log. The command's help and
// docs/operations.md still say "nothing is stored twice" and "an event
// already received by webhook is a duplicate", and the default run (no
// --since) reaches back Stripe's whole 30 days. Root cause:
// backfill/backfill.go:Run stores every listed item through cfg.Store with
// no look at where the retained log starts (keptSince in reconcile.go).
// Setup: weekly partitions from 3 weeks back; a Stripe event received 15
// days ago, its billing job completed, sealed; inlet retention (max_age 7d)
// drops its period and dedupe key. A fake Stripe /v1/events lists a fresh
// event (created now, never delivered) and that event. backfill.Run, no
// --since, as `inlet backfill stripe` runs it.
// Expected: the fresh event stored; the event of the dropped period not
// stored again (left out and counted, as reconcile's Skipped does), no new
// billing job.
// Observed: Stats {Pages:1 Seen:2 Stored:2 Duplicates:0 Skipped:0}; the
// dropped event stored again (1 events row) with 1 new pending billing job.
// Fixed: backfill.Config has the ingress role's DB (required; the CLI
// passes its pool), and Run reads reconcile's keptSince
// (RetentionDroppedThrough, migration 074) when it starts and with each
// page: an item whose listed time is before it is not stored but counted in
// Stats.Skipped and Stats.Dropped, the listing ends after that page (the
// lists are newest first) and the state file is removed; the CLI says so on
// stderr. A listing wholly before it (a Stripe Until) is ErrWindowDropped.
func TestBackfillSkipsWhatRetentionDropped(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	b := r296Setup(t)
	now := time.Now().UTC().Truncate(time.Second)
	pruned, kept := r296DroppedLog(t, b, now)
	fresh := r296Event{id: "evt_review296_fresh", typ: "invoice.paid", created: now.Add(-time.Hour)}
	fake := &r296Stripe{events: []r296Event{fresh, pruned}, pageSize: 100}
	srv := httptest.NewServer(fake)
	defer srv.Close()
	l, err := NewStripe(StripeConfig{APIKey: "sk_test_review296", BaseURL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	stats, err := Run(ctx, b.config("stripe", "stripe"), l)
	if err != nil {
		t.Fatal(err)
	}
	if n := b.count(t, `SELECT count(*) FROM webhook_ingress.events WHERE external_event_id = $1`, fresh.id); n != 1 {
		t.Errorf("the never-delivered event created after the retained log's start was stored %d times, want 1", n)
	}
	again := b.count(t, `SELECT count(*) FROM webhook_ingress.events WHERE external_event_id = $1`, pruned.id)
	open := b.count(t, `SELECT count(*) FROM webhook_ingress.jobs j JOIN webhook_ingress.events e ON e.id = j.event_id
		WHERE e.external_event_id = $1 AND j.handler = 'billing' AND j.status IN ('pending', 'failed', 'leased')`, pruned.id)
	if again != 0 || open != 0 {
		t.Fatalf("backfill after retention dropped %s (received and handled 15 days ago; the retained log starts %s): stats %+v; "+
			"%d events row(s) stored again, %d new open billing job(s): the handler runs a weeks-old event a second time under a new job id",
			pruned.id, kept.Format(time.RFC3339), stats, again, open)
	}
}

// r296GitHub serves a repository hook's deliveries as GitHub documents them
// (GET …/deliveries?per_page&cursor, newest first, Link rel="next";
// GET …/deliveries/{id} with request headers and payload). gone are the ids
// still listed whose fetch answers 404 Not Found: deleted (aged out of
// GitHub's ~3 days) between the listing and the fetch.
type r296GitHub struct {
	mu         sync.Mutex
	deliveries []int64 // ids, newest first; guid-<id>
	pageSize   int
	gone       map[int64]bool
	goneStatus int // the gone fetch's status; 0: 404
	// goneAge is how long ago the gone deliveries were made, as listed
	// (0: an hour, as the others).
	goneAge    time.Duration
	fetched404 int
}

const r296Path = "/repos/acme/widgets/hooks/42/deliveries"

func (f *r296GitHub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Authorization") != "Bearer ghp_review296" {
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	if r.URL.Path == r296Path {
		start := 0
		if c := r.URL.Query().Get("cursor"); c != "" {
			_, _ = fmt.Sscanf(c, "v1_%d", &start)
		}
		end := min(start+f.pageSize, len(f.deliveries))
		var items []string
		for _, id := range f.deliveries[start:end] {
			// goneAge lists the gone deliveries as about to age out of
			// GitHub's ~3-day history: only such a one is taken for gone
			// (review helper-303; a recent one's 404 stops the run).
			age := time.Hour
			if f.gone[id] && f.goneAge > 0 {
				age = f.goneAge
			}
			items = append(items, fmt.Sprintf(`{"id":%d,"guid":"guid-%d","delivered_at":%q,"redelivery":false,"duration":0.1,"status":"OK","status_code":200,"event":"push","action":null,"installation_id":null,"repository_id":1}`,
				id, id, time.Now().UTC().Add(-age).Format(time.RFC3339)))
		}
		if end < len(f.deliveries) {
			w.Header().Set("Link", fmt.Sprintf(`<http://%s%s?per_page=100&cursor=v1_%d>; rel="next"`, r.Host, r296Path, end))
		}
		fmt.Fprintf(w, "[%s]", strings.Join(items, ","))
		return
	}
	var id int64
	if _, err := fmt.Sscanf(strings.TrimPrefix(r.URL.Path, r296Path+"/"), "%d", &id); err != nil || f.gone[id] {
		f.fetched404++
		w.WriteHeader(cmp.Or(f.goneStatus, http.StatusNotFound))
		fmt.Fprint(w, `{"message":"Not Found","documentation_url":"https://docs.github.com/rest/repos/webhooks#get-a-delivery-for-a-repository-webhook","status":"404"}`)
		return
	}
	fmt.Fprintf(w, `{"id":%d,"guid":"guid-%d","event":"push","request":{"headers":{"X-GitHub-Delivery":"guid-%d","X-GitHub-Event":"push","X-GitHub-Hook-ID":"42"},"payload":{"ref":"refs/heads/main","n":%d}},"response":{"headers":{},"payload":"ok"}}`,
		id, id, id, id)
}

// TestBackfillSkipsAGoneGitHubDelivery (review helper-296, fixed).
// Defect: one delivery GitHub lists but answers 404 when its payload is
// fetched (deleted between the list and the fetch: GitHub keeps about 3
// days, and a backfill reads newest first, so it reaches the oldest
// deliveries, those about to age out, last, often after an hour's
// rate-limit wait, since every delivery costs a request) stops the whole
// `inlet backfill github` run. The page's cursor is not saved, so "run the
// same command again to resume" (the CLI's advice) reads the same page,
// fetches the same delivery, and stops the same way: every run, for as long
// as GitHub lists it, and every older delivery (later pages) is never
// stored; the state file is never removed. A delivery with no payload is
// already counted Skipped and passed over (item.Skip); a gone one is not.
// Root cause: backfill/backfill.go:Run returns on any error of it.load
// (GitHub.delivery's statusError 404) instead of counting the item
// skipped; backfill/github.go:GitHub.delivery has no "gone" outcome.
// (Reconcile's storeMissing fails its whole run on it the same way.)
// Setup: fake GitHub hook with deliveries 1005..1001 in pages of 2 ([1005
// 1004] [1003 1002] [1001]); 1003 is listed but its fetch answers 404 Not
// Found, GitHub's body. backfill.Run, then the same command twice more.
// Expected: the run passes over the gone delivery (Skipped 1), stores the
// other 4, ends, and removes its state file.
// Observed: each of the 3 runs stops "backfill github: page 2: GET
// /repos/acme/widgets/hooks/42/deliveries/1003: … 404 Not Found" (the
// last: 1 page, 1 seen, 0 stored, 0 skipped); 2 events stored of the 4
// storable (guid-1002 and guid-1001, older than the gone one, never); the
// state file left with cursor v1_2; 3 fetches answered 404.
// Fixed: GitHub.delivery answers a final 404 or 410 for a delivery the
// same token has just listed with a goneError; Run counts it in
// Stats.Skipped and Stats.Gone, logs its delivery id and goes on, and
// reconcile's storeMissing counts it Missing and Counts.Gone, not stored.
// Every other status still stops the run;
// TestGitHubDeliveryFailureMidPageKeepsWhatWasStoredAndResumes now fails
// its fetch with a 403.
func TestBackfillSkipsAGoneGitHubDelivery(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	b := r296Setup(t)
	fake := &r296GitHub{deliveries: []int64{1005, 1004, 1003, 1002, 1001}, pageSize: 2, gone: map[int64]bool{1003: true}, goneAge: 71 * time.Hour}
	srv := httptest.NewServer(fake)
	defer srv.Close()
	l, err := NewGitHub(GitHubConfig{Token: "ghp_review296", BaseURL: srv.URL, Repo: "acme/widgets", HookID: 42})
	if err != nil {
		t.Fatal(err)
	}
	var errs []string
	var last Stats
	for run := 1; run <= 3; run++ {
		st, err := Run(ctx, b.config("github", "github"), l)
		last = st
		if err == nil {
			break
		}
		errs = append(errs, fmt.Sprintf("run %d: %v", run, err))
	}
	stored := b.count(t, `SELECT count(*) FROM webhook_ingress.events WHERE provider = 'github'`)
	oldest := b.count(t, `SELECT count(*) FROM webhook_ingress.events WHERE external_event_id = 'guid-1001'`)
	if len(errs) > 0 || stored != 4 || oldest != 1 {
		state, _ := readFileString(b.state)
		t.Fatalf("a delivery gone between list and fetch: %d failed runs of %d (last stats %+v):\n  %s\n"+
			"%d events stored, want 4; the oldest delivery guid-1001 stored %d times; %d fetches answered 404; state file: %s",
			len(errs), min(len(errs)+1, 3), last, strings.Join(errs, "\n  "), stored, oldest, fake.fetched404, strings.TrimSpace(state))
	}
	if last.Skipped != 1 {
		t.Errorf("stats %+v: want the gone delivery counted skipped", last)
	}
}

func readFileString(path string) (string, error) {
	b, err := os.ReadFile(path)
	return string(b), err
}

// The retention cut-off ends the listing: Stripe lists newest first, so the
// page after the first event older than the retained log's start is never
// asked for; that event is counted skipped (Dropped), the run ends and its
// state file is removed.
func TestBackfillStopsListingWhereTheRetainedLogStarts(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	b := r296Setup(t)
	now := time.Now().UTC().Truncate(time.Second)
	pruned, kept := r296DroppedLog(t, b, now)
	fresh := r296Event{id: "evt_r296_fresh", typ: "invoice.paid", created: now.Add(-time.Hour)}
	older := r296Event{id: "evt_r296_older", typ: "invoice.paid", created: pruned.created.Add(-24 * time.Hour)}
	fake := &r296Stripe{events: []r296Event{fresh, pruned, older}, pageSize: 1}
	srv := httptest.NewServer(fake)
	defer srv.Close()
	l, err := NewStripe(StripeConfig{APIKey: "sk_test_r296", BaseURL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	stats, err := Run(ctx, b.config("stripe", "stripe"), l)
	if err != nil {
		t.Fatal(err)
	}
	if stats.Stored != 1 || stats.Skipped != 1 || stats.Dropped != 1 || stats.Pages != 2 || !stats.KeptSince.Equal(kept) {
		t.Errorf("stats %+v: want 2 pages, 1 stored, 1 skipped as dropped, kept since %s", stats, kept)
	}
	if !strings.Contains(stats.String(), "1 skipped (1 made before "+kept.UTC().Format(time.RFC3339)) {
		t.Errorf("stats line %q does not say why the event was skipped", stats.String())
	}
	if n := len(fake.queries); n != 2 {
		t.Errorf("%d pages asked for, want 2: nothing past the first event older than the retained log (%q)", n, fake.queries)
	}
	if n := b.count(t, `SELECT count(*) FROM webhook_ingress.events`); n != 1 {
		t.Errorf("%d events stored, want 1 (the fresh one)", n)
	}
	if _, err := os.Stat(b.state); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("state file after the run reached the retained log's start: %v, want it removed", err)
	}
}

// A Stripe listing that ends before the retained log starts is refused
// before any request: ErrWindowDropped, nothing listed or stored.
func TestBackfillRefusesAListingRetentionDropped(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	b := r296Setup(t)
	now := time.Now().UTC().Truncate(time.Second)
	pruned, _ := r296DroppedLog(t, b, now)
	fake := &r296Stripe{events: []r296Event{pruned}, pageSize: 100}
	srv := httptest.NewServer(fake)
	defer srv.Close()
	l, err := NewStripe(StripeConfig{APIKey: "sk_test_r296", BaseURL: srv.URL,
		Since: pruned.created.Add(-time.Hour), Until: pruned.created.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Run(ctx, b.config("stripe", "stripe"), l); !errors.Is(err, ErrWindowDropped) {
		t.Fatalf("a listing wholly before the retained log: %v, want ErrWindowDropped", err)
	}
	if n := len(fake.queries); n != 0 {
		t.Errorf("%d pages asked for, want none", n)
	}
	if n := b.count(t, `SELECT count(*) FROM webhook_ingress.events`); n != 0 {
		t.Errorf("%d events stored, want none", n)
	}
}

// Reconcile passes over a missing delivery gone before its fetch (here 410
// Gone): counted missing and gone, not stored, the others stored; the run
// completes. Backfill takes 410 as it takes 404.
func TestReconcileSkipsAGoneGitHubDelivery(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	b := r296Setup(t)
	fake := &r296GitHub{deliveries: []int64{1005, 1004, 1003, 1002, 1001}, pageSize: 2,
		gone: map[int64]bool{1003: true}, goneStatus: http.StatusGone, goneAge: 71 * time.Hour}
	srv := httptest.NewServer(fake)
	defer srv.Close()
	l, err := NewGitHub(GitHubConfig{Token: "ghp_review296", BaseURL: srv.URL, Repo: "acme/widgets", HookID: 42})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	rep, err := Reconcile(ctx, ReconcileConfig{Source: "github", Scheme: "github", Store: b.store, DB: b.pool,
		Since: now.Add(-72 * time.Hour), Until: now, MaxRetries: 2, Backoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond}, l)
	if err != nil {
		t.Fatalf("reconcile with a gone delivery: %v", err)
	}
	if want := (Counts{Listed: 5, Missing: 5, Stored: 4, Gone: 1}); rep.Total != want {
		t.Errorf("counts %+v, want %+v", rep.Total, want)
	}
	if n := b.count(t, `SELECT count(*) FROM webhook_ingress.events WHERE provider = 'github'`); n != 4 {
		t.Errorf("%d events stored, want 4", n)
	}
	var finished bool
	var runErr *string
	if err := b.admin.QueryRow(ctx, `SELECT finished_at IS NOT NULL, error FROM webhook_ingress.reconcile_runs WHERE id = $1`, rep.RunID).Scan(&finished, &runErr); err != nil {
		t.Fatal(err)
	}
	if !finished || runErr != nil {
		t.Errorf("run %d: finished %t, error %v: want finished without error", rep.RunID, finished, runErr)
	}

	// Backfill: 410 as 404.
	st, err := Run(ctx, b.config("github", "github"), l)
	if err != nil || st.Skipped != 1 || st.Gone != 1 || st.Duplicates != 4 {
		t.Errorf("backfill with a delivery answering 410: %+v, %v; want 1 skipped as gone, 4 duplicates", st, err)
	}
}
