package backfill

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

// TestSurvivor308_EventMadeWhereTheRetainedLogStartsIsStored (mutation
// run, helper-308).
// Guarantee (29b53ca): a backfill leaves out only the events made BEFORE
// the end of the newest period inlet retention dropped (KeptSince); one
// made at that instant belongs to the first period the log keeps (its
// dedupe key is there), and is stored, or found a duplicate, as any other.
// Mutant that no existing test caught (backfill/backfill.go:295, Run):
// "it.At.Before(kept)" made "!it.At.After(kept)" (>= instead of >): an event
// made exactly where the retained log starts is counted Dropped, never
// stored, and the listing stops there although that and later pages are
// still the retained log's.
// Why missed: the retention tests list events hours or days away from the
// dropped period's end, never at it.
// Here Stripe lists a fresh event, one made at KeptSince (a partition
// bound, a whole second) and one a second before it.
func TestSurvivor308_EventMadeWhereTheRetainedLogStartsIsStored(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	b := r296Setup(t)
	now := time.Now().UTC().Truncate(time.Second)
	_, kept := r296DroppedLog(t, b, now)
	if !kept.Equal(kept.Truncate(time.Second)) {
		t.Fatalf("the retained log starts at %s, not a whole second: Stripe's created cannot name it", kept)
	}
	fresh := r296Event{id: "evt_s308_fresh", typ: "invoice.paid", created: now.Add(-time.Hour)}
	atKept := r296Event{id: "evt_s308_at_kept", typ: "invoice.paid", created: kept}
	before := r296Event{id: "evt_s308_before", typ: "invoice.paid", created: kept.Add(-time.Second)}
	fake := &r296Stripe{events: []r296Event{fresh, atKept, before}, pageSize: 100}
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
	if n := b.count(t, `SELECT count(*) FROM webhook_ingress.events WHERE external_event_id = $1`, atKept.id); n != 1 {
		t.Errorf("the event made at %s, where the retained log starts, was stored %d times, want 1 (stats %+v)", kept.Format(time.RFC3339), n, stats)
	}
	if n := b.count(t, `SELECT count(*) FROM webhook_ingress.events WHERE external_event_id = $1`, before.id); n != 0 {
		t.Errorf("the event made a second before the retained log starts was stored %d times, want 0", n)
	}
	if stats.Stored != 2 || stats.Dropped != 1 {
		t.Errorf("stats %+v: want 2 stored (fresh, at the start) and 1 dropped (a second before)", stats)
	}
}

// TestSurvivor308_BackfillStopsAtAPeriodDroppedDuringTheRun (mutation run,
// helper-308).
// Guarantee (29b53ca): Run reads where the retained log starts when it
// starts AND again with each page ("read when the run starts and again
// with each page, as Reconcile reads it"): a period retention drops while a
// run lists is left out from the next page on, its events not stored again
// under new ids.
// Mutant that no existing test caught (backfill/backfill.go:281, Run): the
// per-page "kept, err = keptSince(ctx, q)" replaced by keeping the value
// read at the start: an event of a week retention dropped during the run
// is stored again, with new jobs, and its handlers run it a second time.
// Why missed: TestReconcileStopsAtAPeriodDroppedDuringTheRun tests
// Reconcile's re-read only; Run's retention tests drop every period before
// the run starts.
// Here the fake Stripe drops the week after the retained log's start just
// before it serves the second page, which lists an event of that week.
func TestSurvivor308_BackfillStopsAtAPeriodDroppedDuringTheRun(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	b := r296Setup(t)
	now := time.Now().UTC().Truncate(time.Second)
	_, kept := r296DroppedLog(t, b, now)
	next := kept.Add(7 * 24 * time.Hour) // the week [kept, next) has ended
	fresh := r296Event{id: "evt_s308_fresh", typ: "invoice.paid", created: now.Add(-time.Hour)}
	doomed := r296Event{id: "evt_s308_in_dropped_week", typ: "invoice.paid", created: kept.Add(time.Hour)}
	fake := &r296Stripe{events: []r296Event{fresh, doomed}, pageSize: 1}
	var dropped atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Before the second page: the owner's retention drops that week.
		if r.URL.Query().Get("starting_after") != "" && !dropped.Swap(true) {
			if _, err := b.admin.Exec(r.Context(), `SELECT webhook_ingress.drop_partition($1)`, kept); err != nil {
				t.Errorf("drop the week from %s: %v", kept, err)
			}
		}
		fake.ServeHTTP(w, r)
	}))
	defer srv.Close()
	l, err := NewStripe(StripeConfig{APIKey: "sk_test_review296", BaseURL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	stats, err := Run(ctx, b.config("stripe", "stripe"), l)
	if err != nil {
		t.Fatal(err)
	}
	if !dropped.Load() {
		t.Fatal("the run read one page only")
	}
	if n := b.count(t, `SELECT count(*) FROM webhook_ingress.events WHERE external_event_id = $1`, doomed.id); n != 0 {
		t.Errorf("the event of the week dropped during the run was stored %d times, want 0 (stats %+v)", n, stats)
	}
	if n := b.count(t, `SELECT count(*) FROM webhook_ingress.events WHERE external_event_id = $1`, fresh.id); n != 1 {
		t.Errorf("the event listed first was stored %d times, want 1", n)
	}
	if stats.Stored != 1 || stats.Dropped != 1 || !stats.KeptSince.Equal(next) {
		t.Errorf("stats %+v: want 1 stored, 1 dropped, kept since %s", stats, next)
	}
}

// TestSurvivor308_DeliveryOfUnknownAge404StopsTheRun (mutation run,
// helper-308).
// Guarantee (162f227): a 404 or 410 on a GitHub delivery's fetch is taken
// for its having aged out of GitHub's history only when the list said it
// was made more than githubAgesOutAfter ago; one listed without
// delivered_at is of unknown age, and its 404 stops the run (the cursor not
// moved past its page) instead of its being skipped for good.
// Mutant that no existing test caught (backfill/github.go:195,
// GitHub.delivery): "!deliveredAt.IsZero() &&" dropped, so a zero
// delivered_at (time.Since: centuries) reads as aged out and the delivery
// is counted Gone, the run ending "done" with it never stored.
// Why missed: the fake GitHub of the tests (r296GitHub) always lists
// delivered_at.
func TestSurvivor308_DeliveryOfUnknownAge404StopsTheRun(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	b := r296Setup(t)
	var fetched atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		if r.URL.Path == r296Path {
			_, _ = w.Write([]byte(`[{"id":2001,"guid":"guid-2001","redelivery":false,"duration":0.1,"status":"OK","status_code":200,"event":"push","action":null,"installation_id":null,"repository_id":1}]`))
			return
		}
		fetched.Add(1)
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte(`{"message":"Not Found","status":"404"}`))
	}))
	defer srv.Close()
	l, err := NewGitHub(GitHubConfig{Token: "ghp_review296", BaseURL: srv.URL, Repo: "acme/widgets", HookID: 42})
	if err != nil {
		t.Fatal(err)
	}
	stats, err := Run(ctx, b.config("github", "github"), l)
	if fetched.Load() == 0 {
		t.Fatalf("the delivery was never fetched: %v (%s)", err, stats)
	}
	if err == nil || stats.Gone != 0 {
		t.Errorf("a delivery listed without delivered_at answered 404: run returned %v, stats %s; want the run stopped, nothing counted gone", err, stats)
	}
}
