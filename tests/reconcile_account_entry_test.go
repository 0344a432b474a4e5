package tests

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/backfill"
	"github.com/inlet-dev/inlet/ingress"
	"github.com/inlet-dev/inlet/internal/database"
	"github.com/inlet-dev/inlet/internal/notify"
	"github.com/inlet-dev/inlet/internal/pgtest"
	"github.com/inlet-dev/inlet/internal/testwait"
)

// alwaysLeading always leads (one process in the test).
type alwaysLeading struct{}

func (alwaysLeading) Leading(context.Context) (bool, error) { return true, nil }

// windowStartStripe is a fake Stripe GET /v1/events that lists nothing and
// records the created[gte] of every first-page request (the window start a
// run asked for).
type windowStartStripe struct {
	mu   sync.Mutex
	gtes []time.Time
}

func (f *windowStartStripe) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/v1/events" {
		http.NotFound(w, r)
		return
	}
	if v := r.URL.Query().Get("created[gte]"); v != "" && r.URL.Query().Get("starting_after") == "" {
		if s, err := strconv.ParseInt(v, 10, 64); err == nil {
			f.mu.Lock()
			f.gtes = append(f.gtes, time.Unix(s, 0))
			f.mu.Unlock()
		}
	}
	fmt.Fprint(w, `{"object":"list","url":"/v1/events","has_more":false,"data":[]}`)
}

func (f *windowStartStripe) requests() []time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]time.Time(nil), f.gtes...)
}

// TestManualAccountRunCoversTheDocumentedTypedEntry (review helper-261, fixed;
// this describes the code before the fix).
//
// Defect: `inlet reconcile --help` says "--account LABEL names the account
// the key lists, as the account: of the reconcile.sources entry it catches
// up for (us, eu, test): the run is recorded for that entry's scope (with
// --types, its types too), and the scheduled reconcile counts its window as
// compared for that entry only", and docs/operations.md ("On a schedule")
// says "`inlet reconcile --account us` records a manual run for that entry".
// The entry docs/operations.md shows for it is
// `{source: stripe, ..., types: ["invoice.*", "charge.refunded"], account: us}`:
// labelled AND typed. For such an entry (the one an operator copies) the
// promise is false: the manual run records scope `account=us`
// (backfill/stripe.go Stripe.scope), the entry's scope is
// `account=us types=…`, and schema/queries/reconcile.sql
// ReconcileCoveredUntil (read by backfill/schedule.go scheduledSince) counts
// only runs whose scope equals the entry's exactly (or the whole source's).
// So the operator's documented catch-up over an outage counts for no entry:
// the schedule still sees the gap and reaches back over it, re-listing up to
// 30 days of the provider's API on the next round (and again, as the
// account's run without --types listed a superset of the entry's types).
// The only way to close it is `--account us --types <the entry's types
// exactly>`, which neither the help nor the docs say.
//
// Setup: reconcile.sources has the documented entry shape (account us,
// types [invoice.paid]). A scheduled round at now-47h completes (it covers
// up to now-48h); the operator then runs, as documented, `inlet reconcile
// stripe --account us --since 49h --until 2h` (exit 0); then the next
// scheduled round runs at now. A fake Stripe API records the created[gte]
// of each run's first request.
//
// Expected: the manual run counts for the entry, so the round at now asks
// for its plain window (created[gte] = now - settle - window = now-25h).
//
// Observed: the round at now asked for created[gte] ≈ now-48h (reaching
// back over the stretch the manual run had just compared); reconcile_runs
// holds the manual run with scope `account=us`, the entry's runs with
// `account=us types=invoice.paid`.
//
// Fixed by helper-263: a Stripe run with --account and no --types lists the
// types of the reconcile.sources entry of that label
// (backfill.Section.AccountRun, cmd/inlet/reconcile.go accountEntry), so it
// records exactly the entry's scope (account=us types=invoice.paid) and the
// schedule counts it; --types other than the entry's is recorded as a scope
// of its own, said on stderr and in --help.
func TestManualAccountRunCoversTheDocumentedTypedEntry(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	fake := &windowStartStripe{}
	api := httptest.NewServer(fake)
	defer api.Close()

	const entryAccount, entryType, key = "us", "invoice.paid", "sk_test_account_entry_us"
	section := backfill.Section{Enabled: true, Sources: []backfill.ReconcileSource{
		{Source: "stripe", Type: "stripe", APIKey: key, BaseURL: api.URL, Account: entryAccount, Types: []string{entryType}},
	}}.WithDefaults()
	if err := section.Validate(); err != nil {
		t.Fatal(err)
	}
	pool, err := database.Open(ctx, url, database.Options{Role: section.DBRole, AppName: "account-entry", MaxConns: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	hinter := notify.NewHinter(pool, 0, quiet)
	defer hinter.Stop()
	store := ingress.NewPGStore(pool, hinter)

	admin, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	finished := func() int {
		var n int
		if err := admin.QueryRow(ctx, `SELECT count(*) FROM webhook_ingress.reconcile_runs WHERE finished_at IS NOT NULL AND error IS NULL`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	round := func(now func() time.Time) {
		t.Helper()
		before := finished()
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			backfill.Schedule(rctx, backfill.ScheduleConfig{Section: section, Store: store, DB: pool, Leader: alwaysLeading{}, Logger: quiet, Now: now})
		}()
		testwait.Eventually(t, 90*time.Second, "the scheduled round finished", func() (bool, string) {
			n := finished()
			return n > before, fmt.Sprintf("%d completed runs, want more than %d", n, before)
		})
		cancel()
		<-done
	}

	start := time.Now()
	// A completed scheduled round 47 h ago: the entry is compared up to now-48h.
	round(func() time.Time { return start.Add(-47 * time.Hour) })

	// The operator's documented catch-up for the entry of account us.
	cfg := writeFile(t, t.TempDir(), "inlet.yaml", "database_url: ${DATABASE_URL}\n"+
		"sources:\n  - {name: stripe, type: stripe, secrets: [\"whsec_account_entry\"]}\n"+
		"reconcile:\n  sources:\n"+
		"    - {source: stripe, type: stripe, account: us, api_key: "+key+", types: [\""+entryType+"\"]}\n")
	env := cleanEnv("DATABASE_URL="+url, "STRIPE_API_KEY="+key)
	out, errOut, code := runInlet(t, env, "reconcile", "stripe", "--config", cfg, "--base-url", api.URL,
		"--account", entryAccount, "--since", "49h", "--until", "2h")
	if code != 0 {
		t.Fatalf("inlet reconcile stripe --account us: exit %d\n%s%s", code, out, errOut)
	}

	// The next scheduled round.
	n := len(fake.requests())
	now := time.Now()
	round(func() time.Time { return now })
	reqs := fake.requests()
	if len(reqs) <= n {
		t.Fatalf("the scheduled round made no request to the API")
	}
	got := reqs[len(reqs)-1]
	want := now.Add(-*section.Settle - section.Window)

	scopes := textColumn(t, admin, `SELECT coalesce(scope, '<whole source>') || ' [' || to_char(window_since AT TIME ZONE 'UTC', 'MM-DD HH24:MI') || ', ' ||
		to_char(window_until AT TIME ZONE 'UTC', 'MM-DD HH24:MI') || ']' FROM webhook_ingress.reconcile_runs ORDER BY id`)
	if d := got.Sub(want); d < -10*time.Minute || d > 10*time.Minute {
		t.Errorf("after `inlet reconcile stripe --account us` compared [now-49h, now-2h], the scheduled round of the entry "+
			"{account: us, types: [%s]} still asked the API from %s (%.1f h before now), want its plain window from %s (%.1f h): "+
			"the manual run, which the help says is recorded for that entry's scope, counted for no entry; runs recorded: %s",
			entryType, got.UTC().Format(time.RFC3339), now.Sub(got).Hours(), want.UTC().Format(time.RFC3339), now.Sub(want).Hours(),
			strings.Join(scopes, "; "))
	}
}

// inlet reconcile stripe --account LABEL records the scope of the
// reconcile.sources entry of that label: without --types it lists the
// entry's types (the API is asked for them, stderr says so) and records
// account=us types=…; with the entry's types in another order it records
// the same scope; with other types it records a scope of its own and says
// on stderr that it counts for no entry; where two entries carry the label
// (other types each), a run without --types is refused (exit 2, naming
// --types and both entries) (helper-263).
func TestReconcileCLIAccountTakesTheEntryTypes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	var mu sync.Mutex
	var asked []string // the types[] of each first page, sorted, comma-joined
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("starting_after") == "" {
			mu.Lock()
			types := r.URL.Query()["types[]"]
			slices.Sort(types)
			asked = append(asked, strings.Join(types, ","))
			mu.Unlock()
		}
		fmt.Fprint(w, `{"object":"list","has_more":false,"data":[]}`)
	}))
	defer api.Close()
	dir := t.TempDir()
	cfg := writeFile(t, dir, "inlet.yaml", "database_url: ${DATABASE_URL}\n"+
		"sources:\n  - {name: stripe, type: stripe, secrets: [\"whsec_us\", \"whsec_eu\"]}\n"+
		"reconcile:\n  sources:\n"+
		"    - {source: stripe, type: stripe, account: us, api_key: sk_test_us, types: [\"invoice.paid\", \"charge.refunded\"]}\n"+
		"    - {source: stripe, type: stripe, account: eu, api_key: sk_test_eu}\n")
	env := cleanEnv("DATABASE_URL="+url, "STRIPE_API_KEY=sk_test_us")
	reconcile := func(cfg string, extra ...string) (string, string, int) {
		return runInlet(t, env, append([]string{"reconcile", "stripe", "--config", cfg, "--base-url", api.URL, "--since", "3h"}, extra...)...)
	}
	lastAsked := func() string {
		mu.Lock()
		defer mu.Unlock()
		if len(asked) == 0 {
			return "<none>"
		}
		return asked[len(asked)-1]
	}

	out, errOut, code := reconcile(cfg, "--account", "us")
	if code != 0 {
		t.Fatalf("--account us: exit %d\n%s%s", code, out, errOut)
	}
	if got := lastAsked(); got != "charge.refunded,invoice.paid" {
		t.Errorf("--account us asked the API for types %q, want the entry's: charge.refunded,invoice.paid", got)
	}
	if !strings.Contains(errOut, "reconcile.sources[0]") {
		t.Errorf("--account us: stderr %q, want it to say the types of reconcile.sources[0] are listed", errOut)
	}
	if out, errOut, code = reconcile(cfg, "--account", "us", "--types", "invoice.paid, charge.refunded"); code != 0 || strings.Contains(errOut, "no entry") {
		t.Errorf("--account us with the entry's types reordered: exit %d, stderr %q; want 0 and no warning\n%s", code, errOut, out)
	}
	if out, errOut, code = reconcile(cfg, "--account", "us", "--types", "invoice.paid"); code != 0 || !strings.Contains(errOut, "counts as compared for no entry") {
		t.Errorf("--account us --types invoice.paid: exit %d, stderr %q; want 0 and a warning that the run counts for no entry\n%s", code, errOut, out)
	}
	if out, errOut, code = reconcile(cfg, "--account", "eu"); code != 0 || errOut != "" {
		t.Errorf("--account eu (an entry without types): exit %d, stderr %q; want 0 and nothing on stderr\n%s", code, errOut, out)
	}
	if got := lastAsked(); got != "" {
		t.Errorf("--account eu asked the API for types %q, want every type (the entry has none)", got)
	}

	two := writeFile(t, dir, "two.yaml", "database_url: ${DATABASE_URL}\n"+
		"sources:\n  - {name: stripe, type: stripe, secrets: [\"whsec_us\"]}\n"+
		"reconcile:\n  sources:\n"+
		"    - {source: stripe, type: stripe, account: us, api_key: sk_test_us, types: [\"invoice.paid\"]}\n"+
		"    - {source: stripe, type: stripe, account: us, api_key: sk_test_us, types: [\"charge.refunded\"]}\n")
	if out, errOut, code = reconcile(two, "--account", "us"); code != 2 || !strings.Contains(errOut, "--types") ||
		!strings.Contains(errOut, "reconcile.sources[0]") || !strings.Contains(errOut, "reconcile.sources[1]") {
		t.Errorf("--account us of two entries labelled us: exit %d, stderr %q; want 2 naming --types and both entries\n%s", code, errOut, out)
	}

	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	scopes := textColumn(t, conn, `SELECT coalesce(scope, '<NULL>') FROM webhook_ingress.reconcile_runs WHERE NOT dry_run AND error IS NULL ORDER BY id`)
	want := []string{"account=us types=charge.refunded,invoice.paid", "account=us types=charge.refunded,invoice.paid", "account=us types=invoice.paid", "account=eu"}
	if !slices.Equal(scopes, want) {
		t.Errorf("recorded scopes %q, want %q", scopes, want)
	}
}
