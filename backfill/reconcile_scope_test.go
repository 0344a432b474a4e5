package backfill_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
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
	types := r.URL.Query()["types[]"]
	writeStripeEventsPage(w, r.URL.Query(), f.events, func(e reconcileEvent) bool {
		if len(types) == 0 {
			return true
		}
		for _, t := range types {
			if p, ok := strings.CutSuffix(t, "*"); ok && strings.HasPrefix(e.typ, p) || t == e.typ {
				return true
			}
		}
		return false
	})
}

// writeStripeEventsPage answers a Stripe GET /v1/events from events (newest
// first) as Stripe does: those created within created[gte] and created[lte]
// that keep accepts, 100 a page from starting_after, and has_more.
func writeStripeEventsPage(w http.ResponseWriter, q url.Values, events []reconcileEvent, keep func(reconcileEvent) bool) {
	gte, lte := int64(-1<<62), int64(1<<62)
	if v := q.Get("created[gte]"); v != "" {
		gte, _ = strconv.ParseInt(v, 10, 64)
	}
	if v := q.Get("created[lte]"); v != "" {
		lte, _ = strconv.ParseInt(v, 10, 64)
	}
	var in []reconcileEvent
	for _, e := range events {
		if s := e.at.Unix(); s >= gte && s <= lte && keep(e) {
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

// roundsAcrossOutage runs the rounds before a fix: one completes at now−47h;
// then outage sets the fake (the lost events created, the keys expired) and
// the round at now−20h fails. Each round waits for `runs` finished runs.
func roundsAcrossOutage(t *testing.T, b *reconcileBundle, section backfill.Section, runs int, now time.Time, outage func()) {
	t.Helper()
	runRoundOf(t, b, section, runs, func() time.Time { return now.Add(-47 * time.Hour) })
	outage()
	runRoundOf(t, b, section, runs, func() time.Time { return now.Add(-20 * time.Hour) })
}

// storedStripe counts the stored events of source stripe with the id.
func storedStripe(t *testing.T, b *reconcileBundle, id string) int {
	t.Helper()
	return b.count(t, `SELECT count(*) FROM webhook_ingress.events WHERE provider = 'stripe' AND external_event_id = $1`, id)
}

// runWindows lists reconcile_runs in order as [now±Nh, now±Nh ok=B], with
// " scope=S" (<NULL> for none) before the bracket when withScope is set.
func runWindows(t *testing.T, b *reconcileBundle, now time.Time, withScope bool) []string {
	t.Helper()
	var runs []string
	rows, err := b.admin.Query(context.Background(), `SELECT window_since, window_until, error IS NULL, coalesce(scope, '<NULL>')
		FROM webhook_ingress.reconcile_runs ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var since, until time.Time
		var ok bool
		var scope string
		if err := rows.Scan(&since, &until, &ok, &scope); err != nil {
			t.Fatal(err)
		}
		run := fmt.Sprintf("[now%+.0fh, now%+.0fh ok=%v", since.Sub(now).Hours(), until.Sub(now).Hours(), ok)
		if withScope {
			run += " scope=" + scope
		}
		runs = append(runs, run+"]")
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return runs
}

// manualRunScope runs one manual reconcile of source stripe by a Stripe
// lister of cfg over [cfg.Since, cfg.Until] and returns the scope its run
// recorded (nil for NULL).
func manualRunScope(t *testing.T, b *reconcileBundle, cfg backfill.StripeConfig) *string {
	t.Helper()
	l, err := backfill.NewStripe(cfg)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := backfill.Reconcile(context.Background(), b.config("stripe", "stripe", cfg.Since, cfg.Until, false), l)
	if err != nil {
		t.Fatal(err)
	}
	var scope *string
	if err := b.admin.QueryRow(context.Background(), `SELECT scope FROM webhook_ingress.reconcile_runs WHERE id = $1`, rep.RunID).Scan(&scope); err != nil {
		t.Fatal(err)
	}
	return scope
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

	// Two days ago a round completes for both entries. The events are
	// created, their webhooks lost; the key expires and a round fails for
	// both entries.
	roundsAcrossOutage(t, b, section, 2, now, func() { fake.set([]reconcileEvent{lostInvoice, lostCharge}, true) })
	// The key is fixed: the next round.
	fake.set(nil, false)
	runRoundOf(t, b, section, 2, time.Now)

	runs := runWindows(t, b, now, false)
	inv, ch := storedStripe(t, b, lostInvoice.id), storedStripe(t, b, lostCharge.id)
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

	roundsAcrossOutage(t, b, section, 1, now, func() { fake.set([]reconcileEvent{lostInvoice, lostCharge}, true) })
	fake.set(nil, false)

	// The operator reconciles the invoices over the gap by hand.
	since, until := now.Add(-48*time.Hour), now.Add(-time.Hour)
	scope := manualRunScope(t, b, backfill.StripeConfig{APIKey: "sk_test_reconcile", BaseURL: srv.URL,
		Types: []string{"invoice.*", "invoice.*"}, Since: since, Until: until})
	if scope == nil || *scope != "types=invoice.*" {
		t.Fatalf("the manual run's recorded scope is %v, want types=invoice.* (sorted, without repeats)", scope)
	}

	// The next round: the charge entry's coverage still has the gap.
	runRoundOf(t, b, section, 1, time.Now)
	if inv, ch := storedStripe(t, b, lostInvoice.id), storedStripe(t, b, lostCharge.id); inv != 1 || ch != 1 {
		t.Fatalf("lost invoice.paid stored %d times, lost charge.refunded %d times, want 1 and 1: "+
			"the manual invoice run closed the charge entry's gap", inv, ch)
	}

	// An untyped run lists the whole source: its scope is NULL.
	if scope := manualRunScope(t, b, backfill.StripeConfig{APIKey: "sk_test_reconcile", BaseURL: srv.URL, Since: since, Until: until}); scope != nil {
		t.Fatalf("an untyped run's recorded scope is %q, want NULL (the whole source)", *scope)
	}
}

// accountsStripe is a fake Stripe GET /v1/events serving one list per
// account, chosen by the API key (Authorization: Bearer KEY), as Stripe
// does: created[gte] and created[lte] honoured, newest first,
// starting_after and has_more. While failing is set every key is answered
// 401 (expired keys).
type accountsStripe struct {
	mu       sync.Mutex
	accounts map[string][]reconcileEvent // API key -> events, newest first
	failing  bool
}

func (f *accountsStripe) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	f.mu.Lock()
	defer f.mu.Unlock()
	events, known := f.accounts[key]
	if r.URL.Path != "/v1/events" || !known || f.failing {
		http.Error(w, `{"error":{"type":"invalid_request_error","message":"Expired API Key provided"}}`, http.StatusUnauthorized)
		return
	}
	writeStripeEventsPage(w, r.URL.Query(), events, func(reconcileEvent) bool { return true })
}

func (f *accountsStripe) set(accounts map[string][]reconcileEvent, failing bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if accounts != nil {
		f.accounts = accounts
	}
	f.failing = failing
}

// TestScheduleCoverageIsPerAccount (review helper-251, fixed).
//
// Defect: d15de39 (review helper-241) made the scheduled reconcile's
// reach-back per entry's listing scope, but the scope a Stripe run records
// is its types only (backfill/stripe.go Stripe.scope: "" without types,
// counted as "the whole source" by ReconcileCoveredUntil), not the account
// it lists, which its api_key selects. Two reconcile.sources entries that
// feed one source from two Stripe accounts (a US and an EU account, or the
// live and test mode keys, each with its own webhook endpoint posting to
// the one source whose secrets: holds both signing secrets; Section.Validate
// accepts them) each list only their own account, yet each records scope
// NULL, "the whole source", and so covers the other. After an outage the
// first entry's catch-up run closes the gap for both, and the second entry
// compares only its default window: its account's events in the rest of
// the gap are never compared, stored or counted missing — the very defect
// helper-241 reported (docs/operations.md: "Coverage is per entry's listing
// scope ... a run compares only what it listed"; "no stretch of time goes
// uncompared").
//
// Setup: reconcile.sources has two entries for source "stripe", no types,
// api_key sk_live_us and sk_live_eu (one fake Stripe answering each key with
// its account's events); defaults (interval 1h, window 24h, settle 1h). A
// round completes at now−47h; both keys then fail (401) for a round at
// now−20h; each account created an event at now−36h whose webhook was lost.
// The keys work again and a round runs now.
//
// Expected: both lost events are stored (each entry reaches back over the
// gap to now−48h).
// Observed: the US event is stored once; the EU event 0 times: entry 1
// compared only [now−25h, now−1h], entry 0's run [now−48h, now−1h] having
// closed the gap of the "whole source" (both runs recorded scope NULL).
//
// Fixed: a reconcile.sources entry takes an optional account: label (the
// operator's name for the account its key lists: us, eu, test), part of
// its scope (account=us, account=us types=a,b); the API key is not (a
// rotated key would start a scope with no coverage), nor the base URL (how
// the API is reached, not what it lists). Section.Validate refuses two
// entries of one source with the same scope, or an entry of the whole
// source (no account:, no types:) beside another, naming both and asking
// for account: labels; so this test's entries are labelled us and eu, and
// the same entries without labels are refused. inlet reconcile --account
// records the same scope by hand.
func TestScheduleCoverageIsPerAccount(t *testing.T) {
	t.Parallel()
	b := setupReconcile(t)
	now := time.Now()
	lostUS := reconcileEvent{id: "evt_lost_us", typ: "invoice.paid", at: now.Add(-36 * time.Hour)}
	lostEU := reconcileEvent{id: "evt_lost_eu", typ: "invoice.paid", at: now.Add(-36*time.Hour - time.Minute)}
	fake := &accountsStripe{accounts: map[string][]reconcileEvent{"sk_live_us": nil, "sk_live_eu": nil}}
	srv := httptest.NewServer(fake)
	defer srv.Close()
	unlabelled := backfill.Section{Enabled: true, Sources: []backfill.ReconcileSource{
		{Source: "stripe", Type: "stripe", APIKey: "sk_live_us", BaseURL: srv.URL},
		{Source: "stripe", Type: "stripe", APIKey: "sk_live_eu", BaseURL: srv.URL},
	}}.WithDefaults()
	if err := unlabelled.Validate(); err == nil || !strings.Contains(err.Error(), "reconcile.sources[0] and reconcile.sources[1]") ||
		!strings.Contains(err.Error(), "account:") {
		t.Fatalf("two entries of one source without account labels or types: Validate says %v; "+
			"want an error naming both entries and the account: label", err)
	}
	section := backfill.Section{Enabled: true, Sources: []backfill.ReconcileSource{
		{Source: "stripe", Type: "stripe", APIKey: "sk_live_us", BaseURL: srv.URL, Account: "us"},
		{Source: "stripe", Type: "stripe", APIKey: "sk_live_eu", BaseURL: srv.URL, Account: "eu"},
	}}.WithDefaults()
	if err := section.Validate(); err != nil {
		t.Fatalf("two accounts' entries for one source, labelled, are accepted: %v", err)
	}

	// Each account creates an event, its webhook lost; the keys fail for a
	// round.
	roundsAcrossOutage(t, b, section, 2, now, func() {
		fake.set(map[string][]reconcileEvent{"sk_live_us": {lostUS}, "sk_live_eu": {lostEU}}, true)
	})
	fake.set(nil, false)
	runRoundOf(t, b, section, 2, time.Now)

	runs := runWindows(t, b, now, true)
	us, eu := storedStripe(t, b, lostUS.id), storedStripe(t, b, lostEU.id)
	t.Logf("runs: %s", strings.Join(runs, " "))
	if us != 1 || eu != 1 {
		t.Fatalf("after the outage the lost US event was stored %d times and the lost EU event %d times (want 1 and 1): "+
			"the US entry's catch-up run recorded the whole source as compared, so the EU entry never compared its account over the gap; runs: %s",
			us, eu, strings.Join(runs, " "))
	}
	for i, want := range []string{"account=us", "account=eu"} {
		if !strings.Contains(runs[len(runs)-2+i], "scope="+want+"]") {
			t.Errorf("the last round's run of entry %d: %s, want scope %s", i, runs[len(runs)-2+i], want)
		}
	}
}

// Section.Validate refuses two entries of one source whose runs would count
// as each other's coverage (review helper-251): the same scope (the same
// account label or none, the same types however ordered; the same
// repository or organization and hook, whatever the base URL or key), or an
// entry of the whole source (no account:, no types:) beside any other. The
// error names both entries and the account: label.
func TestReconcileSectionRefusesEntriesSharingAScope(t *testing.T) {
	t.Parallel()
	stripe := func(key, account string, types ...string) backfill.ReconcileSource {
		return backfill.ReconcileSource{Source: "stripe", Type: "stripe", APIKey: key, Account: account, Types: types}
	}
	gh := func(base, account, repo string, hook int64) backfill.ReconcileSource {
		return backfill.ReconcileSource{Source: "github", Type: "github", Token: "ghp_x", BaseURL: base, Account: account, Repo: repo, HookID: hook}
	}
	for _, c := range []struct {
		name    string
		sources []backfill.ReconcileSource
		want    string // "" valid; else what the error contains
	}{
		{"two accounts, no labels", []backfill.ReconcileSource{stripe("sk_us", ""), stripe("sk_eu", "")},
			"reconcile.sources[0] and reconcile.sources[1] (source \"stripe\") list the same scope (the whole source)"},
		{"two accounts, labelled", []backfill.ReconcileSource{stripe("sk_us", "us"), stripe("sk_eu", "eu")}, ""},
		{"one labelled, one of the whole source", []backfill.ReconcileSource{stripe("sk_us", "us"), stripe("sk_eu", "")},
			"reconcile.sources[1] has no account: and no types:"},
		{"the whole source beside a typed entry", []backfill.ReconcileSource{stripe("sk_us", "", "invoice.*"), stripe("sk_eu", "")},
			"reconcile.sources[1] has no account: and no types:"},
		{"the same types, no labels", []backfill.ReconcileSource{stripe("sk_us", "", "b", "a"), stripe("sk_eu", "", "a", "b")},
			"list the same scope (types=a,b)"},
		{"the same label and types", []backfill.ReconcileSource{stripe("sk_us", "us", "a"), stripe("sk_us2", "us", "a")},
			"list the same scope (account=us types=a)"},
		{"more than 20 types in two entries", []backfill.ReconcileSource{stripe("sk_us", "", "a"), stripe("sk_us", "", "b")}, ""},
		{"labelled, the same types", []backfill.ReconcileSource{stripe("sk_us", "us", "a"), stripe("sk_eu", "eu", "a")}, ""},
		{"other sources", []backfill.ReconcileSource{stripe("sk_us", ""), {Source: "stripe_eu", Type: "stripe", APIKey: "sk_eu"}}, ""},
		{"one hook on two servers", []backfill.ReconcileSource{gh("", "", "acme/app", 1), gh("https://ghe.example.com/api/v3", "", "Acme/App", 1)},
			"list the same scope (repo=acme/app hook=1)"},
		{"one hook on two servers, labelled", []backfill.ReconcileSource{gh("", "com", "acme/app", 1), gh("https://ghe.example.com/api/v3", "ghe", "acme/app", 1)}, ""},
		{"two hooks", []backfill.ReconcileSource{gh("", "", "acme/app", 1), gh("", "", "acme/app", 2)}, ""},
		{"a label with a space", []backfill.ReconcileSource{stripe("sk_us", "u s")}, `reconcile.sources[0] "stripe": stripe backfill: account label "u s"`},
	} {
		err := backfill.Section{Sources: c.sources}.WithDefaults().Validate()
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: err %v, want it to contain %q", c.name, err, c.want)
		case c.want != "" && !strings.Contains(err.Error(), "reconcile.sources[0]") && !strings.Contains(err.Error(), "account"):
			t.Errorf("%s: err %v, want it to name the entries and the account: label", c.name, err)
		}
	}
}

// A manual run with --account (StripeConfig.Account) over an outage's gap
// records account=LABEL and closes the gap of that account's entry only:
// the other account's entry still reaches back over it (review helper-251).
func TestManualAccountRunCoversItsAccountOnly(t *testing.T) {
	t.Parallel()
	b := setupReconcile(t)
	now := time.Now()
	lostUS := reconcileEvent{id: "evt_manual_us", typ: "invoice.paid", at: now.Add(-36 * time.Hour)}
	lostEU := reconcileEvent{id: "evt_manual_eu", typ: "invoice.paid", at: now.Add(-36*time.Hour - time.Minute)}
	fake := &accountsStripe{accounts: map[string][]reconcileEvent{"sk_live_us": nil, "sk_live_eu": nil}}
	srv := httptest.NewServer(fake)
	defer srv.Close()
	section := backfill.Section{Enabled: true, Sources: []backfill.ReconcileSource{
		{Source: "stripe", Type: "stripe", APIKey: "sk_live_eu", BaseURL: srv.URL, Account: "eu"},
	}}.WithDefaults()

	roundsAcrossOutage(t, b, section, 1, now, func() {
		fake.set(map[string][]reconcileEvent{"sk_live_us": {lostUS}, "sk_live_eu": {lostEU}}, true)
	})
	fake.set(nil, false)

	// The operator reconciles the US account over the gap by hand.
	since, until := now.Add(-48*time.Hour), now.Add(-time.Hour)
	scope := manualRunScope(t, b, backfill.StripeConfig{APIKey: "sk_live_us", BaseURL: srv.URL, Account: "us", Since: since, Until: until})
	if scope == nil || *scope != "account=us" {
		t.Fatalf("the manual run's recorded scope is %v, want account=us", scope)
	}

	// The next round: the EU entry's coverage still has the gap.
	runRoundOf(t, b, section, 1, time.Now)
	if us, eu := storedStripe(t, b, lostUS.id), storedStripe(t, b, lostEU.id); us != 1 || eu != 1 {
		t.Fatalf("lost US event stored %d times, lost EU event %d times, want 1 and 1: "+
			"the manual US run closed the EU entry's gap", us, eu)
	}
}
