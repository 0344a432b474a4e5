package backfill_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/backfill"
	"github.com/inlet-dev/inlet/internal/testwait"
)

// typedStripe is a fake Stripe GET /v1/events that honours created[gte],
// created[lte] and types[] (exact names, or a prefix ending in '*', as
// Stripe's wildcard), newest first, starting_after and has_more; it answers
// 401 while failing is set (an expired API key).
type typedStripe struct {
	mu      sync.Mutex
	events  []reconcileEvent // newest first
	failing bool
}

func (f *typedStripe) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/v1/events" || r.Header.Get("Authorization") != "Bearer sk_test_reconcile" {
		http.Error(w, "no", http.StatusUnauthorized)
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failing {
		http.Error(w, `{"error":{"type":"invalid_request_error","message":"Expired API Key provided"}}`, http.StatusUnauthorized)
		return
	}
	q := r.URL.Query()
	gte, lte := int64(-1<<62), int64(1<<62)
	if v := q.Get("created[gte]"); v != "" {
		gte, _ = strconv.ParseInt(v, 10, 64)
	}
	if v := q.Get("created[lte]"); v != "" {
		lte, _ = strconv.ParseInt(v, 10, 64)
	}
	types := q["types[]"]
	typeOK := func(typ string) bool {
		if len(types) == 0 {
			return true
		}
		for _, t := range types {
			if p, ok := strings.CutSuffix(t, "*"); ok && strings.HasPrefix(typ, p) || t == typ {
				return true
			}
		}
		return false
	}
	var in []reconcileEvent
	for _, e := range f.events {
		if s := e.at.Unix(); s >= gte && s <= lte && typeOK(e.typ) {
			in = append(in, e)
		}
	}
	start := 0
	if after := q.Get("starting_after"); after != "" {
		for i, e := range in {
			if e.id == after {
				start = i + 1
			}
		}
	}
	end := min(start+100, len(in))
	var data []string
	for _, e := range in[start:end] {
		data = append(data, stripeEventJSON(e))
	}
	fmt.Fprintf(w, `{"object":"list","url":"/v1/events","has_more":%t,"data":[%s]}`, end < len(in), strings.Join(data, ","))
}

func (f *typedStripe) set(events []reconcileEvent, failing bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if events != nil {
		f.events = events
	}
	f.failing = failing
}

// runRoundOf runs one Schedule process until `runs` more reconcile_runs rows
// have finished (one per entry of the section), then stops it.
func runRoundOf(t *testing.T, b *reconcileBundle, section backfill.Section, runs int, now func() time.Time) {
	t.Helper()
	before := b.count(t, `SELECT count(*) FROM webhook_ingress.reconcile_runs WHERE finished_at IS NOT NULL`)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		backfill.Schedule(ctx, backfill.ScheduleConfig{Section: section, Store: b.store, DB: b.pool, Leader: alwaysLeader{},
			Metrics: b.metrics, Now: now})
	}()
	testwait.Eventually(t, 90*time.Second, "the process's first round finished", func() (bool, string) {
		n := b.count(t, `SELECT count(*) FROM webhook_ingress.reconcile_runs WHERE finished_at IS NOT NULL`)
		return n >= before+runs, fmt.Sprintf("%d finished runs, want %d", n, before+runs)
	})
	cancel()
	<-done
}

// TestScheduleCoverageIsPerListingScope (review helper-241, fixed).
//
// Defect: the scheduled reconcile's reach-back (operations.md,
// "Reconciliation with the provider": a round after failed ones "reaches
// back to where the source's completed runs first left a stretch
// uncompared, so no stretch of time goes uncompared") reads coverage per
// source name only (schema/queries/reconcile.sql ReconcileCoveredUntil,
// called by backfill/schedule.go scheduledSince), while a run compares only
// what its lister lists: a Stripe entry's `types:` (at most 20 per entry, so
// an endpoint of more types needs two entries for one source) or a GitHub
// entry's repo/hook (several repositories' hooks feeding one `github` source).
// reconcile_runs records neither, and Section.Validate accepts several
// entries for one source. After an outage, the first entry's catch-up run
// closes the gap for the source, and the second entry, run next in the same
// round, compares only its default window: its events in the rest of the gap
// are never compared, never stored, never counted missing. The same happens
// after a manual `inlet reconcile stripe --types X` over the gap.
//
// Setup: reconcile.sources has two entries for source "stripe" (same key):
// types ["invoice.*"] and types ["charge.*"]; defaults (interval 1h, window
// 24h, settle 1h). A round completes at now−47h; then the key expires and a
// round at now−20h fails; Stripe created invoice.paid and charge.refunded
// events at now−36h whose webhooks were lost. The key is fixed and a round
// runs now.
//
// Expected: both lost events are stored (each entry reaches back to now−48h).
// Observed: invoice.paid stored once (entry 1 compared [now−48h, now−1h]);
// charge.refunded stored 0 times (entry 2 compared only [now−25h, now−1h]).
//
// Fixed: each run records what it listed in reconcile_runs.scope (migration
// 071; the Lister's scope: a Stripe run's sorted types, a GitHub run's
// repo/org and hook id; NULL for a Stripe run without types and the runs
// recorded before 071), and ReconcileCoveredUntil merges, for an entry, the
// runs of its scope and of the whole source only.
func TestScheduleCoverageIsPerListingScope(t *testing.T) {
	t.Parallel()
	b := setupReconcile(t)
	now := time.Now()
	lostInvoice := reconcileEvent{id: "evt_lost_invoice", typ: "invoice.paid", at: now.Add(-36 * time.Hour)}
	lostCharge := reconcileEvent{id: "evt_lost_charge", typ: "charge.refunded", at: now.Add(-36*time.Hour - time.Minute)}
	fake := &typedStripe{}
	srv := httptest.NewServer(fake)
	defer srv.Close()
	section := backfill.Section{Enabled: true, Sources: []backfill.ReconcileSource{
		{Source: "stripe", Type: "stripe", APIKey: "sk_test_reconcile", BaseURL: srv.URL, Types: []string{"invoice.*"}},
		{Source: "stripe", Type: "stripe", APIKey: "sk_test_reconcile", BaseURL: srv.URL, Types: []string{"charge.*"}},
	}}.WithDefaults()
	if err := section.Validate(); err != nil {
		t.Fatalf("two entries for one source are accepted (test premise): %v", err)
	}

	// Two days ago a round completes for both entries.
	runRoundOf(t, b, section, 2, func() time.Time { return now.Add(-47 * time.Hour) })
	// The events are created, their webhooks lost; the key expires and a
	// round fails for both entries.
	fake.set([]reconcileEvent{lostInvoice, lostCharge}, true)
	runRoundOf(t, b, section, 2, func() time.Time { return now.Add(-20 * time.Hour) })
	// The key is fixed: the next round.
	fake.set(nil, false)
	runRoundOf(t, b, section, 2, time.Now)

	var runs []string
	rows, err := b.admin.Query(context.Background(), `SELECT window_since, window_until, error IS NULL FROM webhook_ingress.reconcile_runs ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var since, until time.Time
		var ok bool
		if err := rows.Scan(&since, &until, &ok); err != nil {
			t.Fatal(err)
		}
		runs = append(runs, fmt.Sprintf("[now%+.0fh, now%+.0fh ok=%v]", since.Sub(now).Hours(), until.Sub(now).Hours(), ok))
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	stored := func(id string) int {
		return b.count(t, `SELECT count(*) FROM webhook_ingress.events WHERE provider = 'stripe' AND external_event_id = $1`, id)
	}
	inv, ch := stored(lostInvoice.id), stored(lostCharge.id)
	if inv != 1 || ch != 1 {
		t.Fatalf("after the outage, the lost invoice.paid was stored %d times and the lost charge.refunded %d times (want 1 and 1): "+
			"the first entry's catch-up closed the source's gap, so the second entry never compared its types in it; runs: %s",
			inv, ch, strings.Join(runs, " "))
	}
}

// A manual run with --types (inlet reconcile stripe --types 'invoice.*')
// over an outage's gap records its scope and closes the gap of that listing
// only: the schedule's entry of other types of the same source still reaches
// back over the gap (review helper-241). A run without a type filter is
// recorded for the whole source (scope NULL).
func TestManualTypedRunCoversItsTypesOnly(t *testing.T) {
	t.Parallel()
	b := setupReconcile(t)
	now := time.Now()
	lostInvoice := reconcileEvent{id: "evt_manual_invoice", typ: "invoice.paid", at: now.Add(-36 * time.Hour)}
	lostCharge := reconcileEvent{id: "evt_manual_charge", typ: "charge.refunded", at: now.Add(-36*time.Hour - time.Minute)}
	fake := &typedStripe{}
	srv := httptest.NewServer(fake)
	defer srv.Close()
	section := backfill.Section{Enabled: true, Sources: []backfill.ReconcileSource{
		{Source: "stripe", Type: "stripe", APIKey: "sk_test_reconcile", BaseURL: srv.URL, Types: []string{"charge.*"}},
	}}.WithDefaults()

	runRoundOf(t, b, section, 1, func() time.Time { return now.Add(-47 * time.Hour) })
	fake.set([]reconcileEvent{lostInvoice, lostCharge}, true)
	runRoundOf(t, b, section, 1, func() time.Time { return now.Add(-20 * time.Hour) })
	fake.set(nil, false)

	// The operator reconciles the invoices over the gap by hand.
	since, until := now.Add(-48*time.Hour), now.Add(-time.Hour)
	l, err := backfill.NewStripe(backfill.StripeConfig{APIKey: "sk_test_reconcile", BaseURL: srv.URL,
		Types: []string{"invoice.*", "invoice.*"}, Since: since, Until: until})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := backfill.Reconcile(context.Background(), b.config("stripe", "stripe", since, until, false), l)
	if err != nil {
		t.Fatal(err)
	}
	var scope *string
	if err := b.admin.QueryRow(context.Background(), `SELECT scope FROM webhook_ingress.reconcile_runs WHERE id = $1`, rep.RunID).Scan(&scope); err != nil {
		t.Fatal(err)
	}
	if scope == nil || *scope != "types=invoice.*" {
		t.Fatalf("the manual run's recorded scope is %v, want types=invoice.* (sorted, without repeats)", scope)
	}

	// The next round: the charge entry's coverage still has the gap.
	runRoundOf(t, b, section, 1, time.Now)
	stored := func(id string) int {
		return b.count(t, `SELECT count(*) FROM webhook_ingress.events WHERE provider = 'stripe' AND external_event_id = $1`, id)
	}
	if inv, ch := stored(lostInvoice.id), stored(lostCharge.id); inv != 1 || ch != 1 {
		t.Fatalf("lost invoice.paid stored %d times, lost charge.refunded %d times, want 1 and 1: "+
			"the manual invoice run closed the charge entry's gap", inv, ch)
	}

	// An untyped run lists the whole source: its scope is NULL.
	all, err := backfill.NewStripe(backfill.StripeConfig{APIKey: "sk_test_reconcile", BaseURL: srv.URL, Since: since, Until: until})
	if err != nil {
		t.Fatal(err)
	}
	rep, err = backfill.Reconcile(context.Background(), b.config("stripe", "stripe", since, until, false), all)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.admin.QueryRow(context.Background(), `SELECT scope FROM webhook_ingress.reconcile_runs WHERE id = $1`, rep.RunID).Scan(&scope); err != nil {
		t.Fatal(err)
	}
	if scope != nil {
		t.Fatalf("an untyped run's recorded scope is %q, want NULL (the whole source)", *scope)
	}
}
