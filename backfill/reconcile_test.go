package backfill_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/inlet-dev/inlet/backfill"
	"github.com/inlet-dev/inlet/ingress"
)

// reconcileEvent is one event in a fake provider's list.
type reconcileEvent struct {
	id, typ   string
	at        time.Time
	delivered bool // received as a webhook before the run (in the log)
}

// listStripe is a fake Stripe events API: newest first, pageSize a page,
// starting_after taken from the last listing of the id (so a listing twice
// does not loop), one 429 with Retry-After: 1 first.
type listStripe struct {
	events   []reconcileEvent // in list order, duplicates included
	pageSize int

	mu        sync.Mutex
	rateLimit int
	queries   []string
}

func (f *listStripe) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/v1/events" || r.Header.Get("Authorization") != "Bearer sk_test_reconcile" {
		http.Error(w, "no", http.StatusUnauthorized)
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.rateLimit > 0 {
		f.rateLimit--
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusTooManyRequests)
		return
	}
	f.queries = append(f.queries, r.URL.RawQuery)
	start := 0
	if after := r.URL.Query().Get("starting_after"); after != "" {
		for i, e := range f.events {
			if e.id == after {
				start = i + 1
			}
		}
	}
	end := min(start+f.pageSize, len(f.events))
	var data []string
	for _, e := range f.events[start:end] {
		data = append(data, stripeEventJSON(e))
	}
	fmt.Fprintf(w, `{"object":"list","url":"/v1/events","has_more":%t,"data":[%s]}`, end < len(f.events), strings.Join(data, ","))
}

func stripeEventJSON(e reconcileEvent) string {
	return fmt.Sprintf(`{"id":%q,"object":"event","type":%q,"created":%d,"data":{"object":{"n": 1}}}`, e.id, e.typ, e.at.Unix())
}

type reconcileBundle struct {
	*testBundle
	reg     *prometheus.Registry
	metrics *backfill.ReconcileMetrics
}

func setupReconcile(t *testing.T) *reconcileBundle {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := backfill.NewReconcileMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	return &reconcileBundle{testBundle: setup(t), reg: reg, metrics: m}
}

func (b *reconcileBundle) config(source, scheme string, since, until time.Time, dry bool) backfill.ReconcileConfig {
	return backfill.ReconcileConfig{Source: source, Scheme: scheme, Store: b.store, DB: b.pool, Since: since, Until: until,
		DryRun: dry, MaxRetries: 2, Backoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond, Metrics: b.metrics}
}

// deliver stores the events marked delivered as ingress stores a verified
// webhook.
func (b *reconcileBundle) deliver(t *testing.T, source, scheme string, events []reconcileEvent, body func(reconcileEvent) string) {
	t.Helper()
	for _, e := range events {
		if !e.delivered {
			continue
		}
		if _, err := b.store.Insert(context.Background(), &ingress.Event{Provider: source, Scheme: scheme, ExternalID: e.id,
			EventType: e.typ, Headers: map[string][]string{"X-Delivered": {"1"}}, RawBody: []byte(body(e)), Verified: true}); err != nil {
			t.Fatal(err)
		}
	}
}

func (b *reconcileBundle) missingMetric(t *testing.T, source string) float64 {
	t.Helper()
	mfs, err := b.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "inlet_reconcile_missing_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "source" && l.GetValue() == source {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return -1
}

func checkReport(t *testing.T, rep backfill.Report, total backfill.Counts, types map[string]backfill.Counts) {
	t.Helper()
	if rep.Total != total {
		t.Errorf("run %d total = %+v, want %+v", rep.RunID, rep.Total, total)
	}
	got := map[string]backfill.Counts{}
	for _, tc := range rep.Types {
		got[tc.Type] = tc.Counts
	}
	for typ, want := range types {
		if got[typ] != want {
			t.Errorf("run %d type %s = %+v, want %+v", rep.RunID, typ, got[typ], want)
		}
	}
	if len(got) != len(types) {
		t.Errorf("run %d types %v, want %d types", rep.RunID, got, len(types))
	}
}

// The guarantee: every event the provider lists in the window and the log
// lacks is stored, exactly once, marked with the run that stored it; what
// the log holds is left alone; a dry run stores nothing; a second run finds
// nothing missing.
func TestReconcileStripeStoresExactlyTheMissing(t *testing.T) {
	t.Parallel()
	b := setupReconcile(t)
	b.subscribe(t, "billing", "stripe")
	now := time.Now().UTC().Truncate(time.Second)
	since, until := now.Add(-24*time.Hour), now
	ev := func(n int, typ string, delivered bool) reconcileEvent {
		return reconcileEvent{id: fmt.Sprintf("evt_r%d", n), typ: typ, at: now.Add(-time.Duration(8-n) * time.Hour), delivered: delivered}
	}
	events := []reconcileEvent{
		ev(7, "invoice.paid", true),
		ev(6, "invoice.paid", false),
		ev(5, "charge.refunded", true),
		ev(5, "charge.refunded", true), // listed twice
		ev(4, "charge.refunded", false),
		ev(3, "invoice.paid", true),
		ev(2, "invoice.paid", false),
		ev(1, "charge.refunded", true),
		{id: "evt_old", typ: "invoice.paid", at: since.Add(-time.Hour)}, // before the window: never stored
	}
	fake := &listStripe{events: events, pageSize: 2, rateLimit: 1}
	srv := httptest.NewServer(fake)
	defer srv.Close()
	b.deliver(t, "stripe", "stripe", events, stripeEventJSON)
	l, err := backfill.NewStripe(backfill.StripeConfig{APIKey: "sk_test_reconcile", BaseURL: srv.URL, Since: since, Until: until})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	dry, err := backfill.Reconcile(ctx, b.config("stripe", "stripe", since, until, true), l)
	if err != nil {
		t.Fatal(err)
	}
	checkReport(t, dry, backfill.Counts{Listed: 7, AlreadyStored: 4, Missing: 3, Duplicates: 1}, map[string]backfill.Counts{
		"invoice.paid":    {Listed: 4, AlreadyStored: 2, Missing: 2},
		"charge.refunded": {Listed: 3, AlreadyStored: 2, Missing: 1, Duplicates: 1},
	})
	if dry.RateLimitWaits != 1 || dry.Pages != 5 {
		t.Errorf("dry run: %d rate-limit waits, %d pages; want 1, 5", dry.RateLimitWaits, dry.Pages)
	}
	if n := b.count(t, `SELECT count(*) FROM webhook_ingress.events WHERE provider = 'stripe'`); n != 4 {
		t.Fatalf("after the dry run %d events, want the 4 delivered", n)
	}
	if got := b.missingMetric(t, "stripe"); got != 3 {
		t.Errorf("inlet_reconcile_missing_total after the dry run = %v, want 3", got)
	}
	if q := fake.queries[0]; !strings.Contains(q, "created%5Bgte%5D="+strconv.FormatInt(since.Unix(), 10)) ||
		!strings.Contains(q, "created%5Blte%5D="+strconv.FormatInt(until.Unix(), 10)) {
		t.Errorf("first list query %q does not ask for the window", q)
	}

	run, err := backfill.Reconcile(ctx, b.config("stripe", "stripe", since, until, false), l)
	if err != nil {
		t.Fatal(err)
	}
	checkReport(t, run, backfill.Counts{Listed: 7, AlreadyStored: 4, Missing: 3, Stored: 3, Duplicates: 1}, map[string]backfill.Counts{
		"invoice.paid":    {Listed: 4, AlreadyStored: 2, Missing: 2, Stored: 2},
		"charge.refunded": {Listed: 3, AlreadyStored: 2, Missing: 1, Stored: 1, Duplicates: 1},
	})
	stored := b.events(t, "stripe")
	if len(stored) != 7 {
		t.Fatalf("%d events stored, want 7", len(stored))
	}
	for _, e := range events {
		got, ok := stored[e.id]
		switch {
		case e.id == "evt_old":
			if ok {
				t.Errorf("%s, before the window, was stored", e.id)
			}
		case e.delivered:
			if !got.verified || strings.Contains(got.headers, backfill.ReconcileHeader) {
				t.Errorf("delivered %s was changed: %+v", e.id, got)
			}
		default:
			if got.verified || string(got.body) != stripeEventJSON(e) || got.typ != e.typ ||
				!strings.Contains(got.headers, fmt.Sprintf(`"Inlet-Reconcile": ["%d"]`, run.RunID)) ||
				!strings.Contains(got.headers, `"Inlet-Backfill": ["stripe-events-api"]`) {
				t.Errorf("reconciled %s: %+v (run %d)", e.id, got, run.RunID)
			}
		}
	}
	if n := b.count(t, `SELECT count(*) FROM webhook_ingress.jobs WHERE handler = 'billing'`); n != 7 {
		t.Errorf("%d billing jobs, want 7 (4 delivered, 3 reconciled)", n)
	}
	if got := b.missingMetric(t, "stripe"); got != 6 {
		t.Errorf("inlet_reconcile_missing_total after the run = %v, want 6", got)
	}

	again, err := backfill.Reconcile(ctx, b.config("stripe", "stripe", since, until, false), l)
	if err != nil {
		t.Fatal(err)
	}
	checkReport(t, again, backfill.Counts{Listed: 7, AlreadyStored: 7, Duplicates: 1}, map[string]backfill.Counts{
		"invoice.paid":    {Listed: 4, AlreadyStored: 4},
		"charge.refunded": {Listed: 3, AlreadyStored: 3, Duplicates: 1},
	})
	if n := b.count(t, `SELECT count(*) FROM webhook_ingress.events WHERE provider = 'stripe'`); n != 7 {
		t.Errorf("after the second run %d events, want 7", n)
	}

	// Each run is recorded with its counts.
	rows, err := b.admin.Query(ctx, `SELECT id, dry_run, listed, already_stored, missing, stored, duplicates, finished_at IS NOT NULL, error IS NULL, by_type::text
		FROM webhook_ingress.reconcile_runs WHERE source = 'stripe' ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	var recorded []string
	for rows.Next() {
		var id, listed, already, missing, st, dups int64
		var dryRun, finished, ok bool
		var byType string
		if err := rows.Scan(&id, &dryRun, &listed, &already, &missing, &st, &dups, &finished, &ok, &byType); err != nil {
			t.Fatal(err)
		}
		var types []backfill.TypeCounts
		if err := json.Unmarshal([]byte(byType), &types); err != nil || len(types) != 2 {
			t.Errorf("run %d by_type %s: %v", id, byType, err)
		}
		recorded = append(recorded, fmt.Sprintf("%t %d/%d/%d/%d/%d %t %t", dryRun, listed, already, missing, st, dups, finished, ok))
	}
	rows.Close()
	want := []string{"true 7/4/3/0/1 true true", "false 7/4/3/3/1 true true", "false 7/7/0/0/1 true true"}
	if !slices.Equal(recorded, want) {
		t.Errorf("reconcile_runs %q, want %q", recorded, want)
	}
}

// listGitHub is a fake GitHub hook deliveries API: Link-header pages, a
// redelivery listed beside the first delivery, one 429 with Retry-After.
type listGitHub struct {
	deliveries []ghListed // newest first
	pageSize   int

	mu        sync.Mutex
	rateLimit int
	fetched   []int64 // deliveries whose request was read
}

type ghListed struct {
	id int64
	reconcileEvent
}

func (f *listGitHub) payload(guid string) string {
	return fmt.Sprintf(`{"ref": "refs/heads/main", "guid": %q}`, guid)
}

func (f *listGitHub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Authorization") != "Bearer ghp_reconcile" {
		http.Error(w, "no", http.StatusUnauthorized)
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.rateLimit > 0 {
		f.rateLimit--
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusTooManyRequests)
		return
	}
	if r.URL.Path == ghPath {
		start, _ := strconv.Atoi(r.URL.Query().Get("cursor"))
		end := min(start+f.pageSize, len(f.deliveries))
		var items []string
		for _, d := range f.deliveries[start:end] {
			items = append(items, fmt.Sprintf(`{"id":%d,"guid":%q,"delivered_at":%q,"redelivery":false,"status":"OK","status_code":200,"event":%q,"action":null}`,
				d.id, d.reconcileEvent.id, d.at.Format(time.RFC3339), d.typ))
		}
		if end < len(f.deliveries) {
			w.Header().Set("Link", fmt.Sprintf(`<http://%s%s?per_page=100&cursor=%d>; rel="next"`, r.Host, ghPath, end))
		}
		fmt.Fprintf(w, "[%s]", strings.Join(items, ","))
		return
	}
	id, _ := strconv.ParseInt(strings.TrimPrefix(r.URL.Path, ghPath+"/"), 10, 64)
	for _, d := range f.deliveries {
		if d.id == id {
			f.fetched = append(f.fetched, id)
			fmt.Fprintf(w, `{"id":%d,"guid":%q,"event":%q,"request":{"headers":{"X-GitHub-Delivery":%q,"X-GitHub-Event":%q,"X-Hub-Signature-256":"sha256=00"},"payload":%s},"response":{}}`,
				d.id, d.reconcileEvent.id, d.typ, d.reconcileEvent.id, d.typ, f.payload(d.reconcileEvent.id))
			return
		}
	}
	http.NotFound(w, r)
}

func TestReconcileGitHubFetchesOnlyTheMissing(t *testing.T) {
	t.Parallel()
	b := setupReconcile(t)
	now := time.Now().UTC().Truncate(time.Second)
	since, until := now.Add(-24*time.Hour), now.Add(-time.Minute)
	d := func(id int64, guid, typ string, ago time.Duration, delivered bool) ghListed {
		return ghListed{id: id, reconcileEvent: reconcileEvent{id: guid, typ: typ, at: now.Add(-ago), delivered: delivered}}
	}
	fake := &listGitHub{pageSize: 2, rateLimit: 1, deliveries: []ghListed{
		d(107, "guid-future", "push", 0, false), // after the window: not looked at
		d(106, "guid-5", "push", time.Hour, false),
		d(105, "guid-4", "pull_request", 2*time.Hour, false), // a redelivery of guid-4
		d(104, "guid-4", "pull_request", 3*time.Hour, false),
		d(103, "guid-3", "push", 4*time.Hour, true),
		d(102, "guid-2", "push", 5*time.Hour, false),
		d(101, "guid-1", "pull_request", 6*time.Hour, true),
		d(100, "guid-0", "push", 25*time.Hour, false), // before the window: the list ends here
		d(99, "guid-older", "push", 26*time.Hour, false),
	}}
	srv := httptest.NewServer(fake)
	defer srv.Close()
	var events []reconcileEvent
	for _, x := range fake.deliveries {
		events = append(events, x.reconcileEvent)
	}
	b.deliver(t, "github", "github", events, func(e reconcileEvent) string { return fake.payload(e.id) })
	l, err := backfill.NewGitHub(backfill.GitHubConfig{Token: "ghp_reconcile", BaseURL: srv.URL, Repo: "acme/widgets", HookID: 42})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	rep, err := backfill.Reconcile(ctx, b.config("github", "github", since, until, false), l)
	if err != nil {
		t.Fatal(err)
	}
	checkReport(t, rep, backfill.Counts{Listed: 5, AlreadyStored: 2, Missing: 3, Stored: 3, Duplicates: 1}, map[string]backfill.Counts{
		"push":         {Listed: 3, AlreadyStored: 1, Missing: 2, Stored: 2},
		"pull_request": {Listed: 2, AlreadyStored: 1, Missing: 1, Stored: 1, Duplicates: 1},
	})
	if rep.RateLimitWaits != 1 || rep.Pages != 4 {
		t.Errorf("%d rate-limit waits, %d pages; want 1, 4 (the list stops at the window's start)", rep.RateLimitWaits, rep.Pages)
	}
	slices.Sort(fake.fetched)
	if !slices.Equal(fake.fetched, []int64{102, 105, 106}) {
		t.Errorf("fetched deliveries %v, want only the missing ones' (102, 105, 106)", fake.fetched)
	}
	stored := b.events(t, "github")
	if len(stored) != 5 {
		t.Errorf("%d events stored, want 5", len(stored))
	}
	for _, guid := range []string{"guid-2", "guid-4", "guid-5"} {
		e := stored[guid]
		if e.verified || string(e.body) != fake.payload(guid) || strings.Contains(e.headers, "Signature") ||
			!strings.Contains(e.headers, fmt.Sprintf(`"Inlet-Reconcile": ["%d"]`, rep.RunID)) {
			t.Errorf("reconciled %s: %+v", guid, e)
		}
	}
	if got := b.missingMetric(t, "github"); got != 3 {
		t.Errorf("inlet_reconcile_missing_total = %v, want 3", got)
	}
	again, err := backfill.Reconcile(ctx, b.config("github", "github", since, until, false), l)
	if err != nil {
		t.Fatal(err)
	}
	if again.Total != (backfill.Counts{Listed: 5, AlreadyStored: 5, Duplicates: 1}) {
		t.Errorf("second run %+v", again.Total)
	}
	if len(fake.fetched) != 3 {
		t.Errorf("the second run fetched deliveries: %v", fake.fetched)
	}
}

// A run that fails (the API refuses) is recorded with its error.
func TestReconcileRecordsAFailedRun(t *testing.T) {
	t.Parallel()
	b := setupReconcile(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "bad key", http.StatusUnauthorized)
	}))
	defer srv.Close()
	l, err := backfill.NewStripe(backfill.StripeConfig{APIKey: "sk_wrong", BaseURL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	_, err = backfill.Reconcile(context.Background(), b.config("stripe", "stripe", now.Add(-time.Hour), now, false), l)
	if err == nil || !strings.Contains(err.Error(), "401") {
		t.Fatalf("err = %v, want the 401", err)
	}
	if n := b.count(t, `SELECT count(*) FROM webhook_ingress.reconcile_runs WHERE error LIKE '%401%' AND finished_at IS NOT NULL`); n != 1 {
		t.Errorf("%d failed runs recorded, want 1", n)
	}
}
