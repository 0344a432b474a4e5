package dashboard_test

import (
	"context"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"
)

// reconcileRows are the overview's Reconciliation rows of source.
func reconcileRows(body, source string) []string {
	re := regexp.MustCompile(`(?s)<tr class="reconcile-run" data-source="` + regexp.QuoteMeta(source) + `"[^>]*>.*?</tr>`)
	return re.FindAllString(body, -1)
}

// TestReconcileTableSetsApartScopesNoEntryListsAnyMore (review helper-327, fixed).
//
// Defect: the Reconciliation table (schema/queries/reconcile.sql
// LatestReconcileRuns, read by dashboard/reconcile.go loadReconcileRuns)
// shows the newest run of every (source, scope) that ever ran, forever.
// docs/operations.md says it is "a row per reconcile.sources entry's
// listing scope"; but a scope no entry lists any more keeps its last row
// for good, with its error: the runs recorded before migration 071 (or by
// a previous version's streamer) have scope NULL, "whole source", which a
// GitHub entry never records (its scope is always repo=… hook=…); a Stripe
// entry removed (its account closed, key revoked) or relabelled
// ("Renaming a label starts a scope" per docs). Before this commit the
// source's next run replaced such a row; now a red "error 401
// Unauthorized" stays on the overview for weeks after every run of every
// configured entry succeeded, and nothing short of a DELETE by the owner
// clears it: an alarm operators learn to ignore, the opposite of what the
// table was fixed for.
//
// Setup: github: a run of scope NULL (pre-071) 10 days ago failed 401,
// then 240 hourly runs of its one entry (repo=acme/app hook=1), all ok.
// stripe: entry account=eu failed 401 7 days ago and was removed; entry
// account=us ran ok 168 times since.
//
// Expected: no Reconciliation row of github or stripe shows an error (each
// source's entries succeeded on every round of the last week); a scope
// superseded so long is not shown as the current state.
//
// Observed: github shows 2 rows, one "whole source" with the 10-day-old
// "error … 401 Unauthorized"; stripe shows 2 rows, account=eu with its
// 7-day-old "error … 401 Unauthorized".
//
// Fixed: LatestReconcileRuns marks a row superseded when its run started
// more than 24 hours (reconcile.interval's most) before the newest row of
// its source that is not a dry run; the overview lists those apart ("No
// longer run", rows of class reconcile-superseded, with their last outcome
// in plain text and no error badge), and the table shows the others.
func TestReconcileTableSetsApartScopesNoEntryListsAnyMore(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	// github: the last run before migration 071 (no scope) failed, 10 days ago.
	b.exec(t, `INSERT INTO webhook_ingress.reconcile_runs (source, api, window_since, window_until, dry_run, started_at, finished_at, scope, error)
		VALUES ('github', 'github-hook-deliveries', now() - interval '10 days 1 hour', now() - interval '10 days', false,
		        now() - interval '10 days', now() - interval '10 days', NULL, 'GET /repos/acme/app/hooks/1/deliveries: 401 Unauthorized')`)
	// Then every hourly round of its entry succeeded.
	b.exec(t, `INSERT INTO webhook_ingress.reconcile_runs (source, api, window_since, window_until, dry_run, started_at, finished_at, scope, listed, already_stored)
		SELECT 'github', 'github-hook-deliveries', now() - (g + 1) * interval '1 hour', now() - g * interval '1 hour', false,
		       now() - g * interval '1 hour', now() - g * interval '1 hour', 'repo=acme/app hook=1', 4, 4
		FROM generate_series(240, 1, -1) g`)
	// stripe: entry account=eu failed 7 days ago (its key revoked, the
	// account closed) and was removed; account=us ran ok on every round since.
	b.exec(t, `INSERT INTO webhook_ingress.reconcile_runs (source, api, window_since, window_until, dry_run, started_at, finished_at, scope, error)
		VALUES ('stripe', 'stripe-events-api', now() - interval '7 days 1 hour', now() - interval '7 days', false,
		        now() - interval '7 days', now() - interval '7 days', 'account=eu', 'GET /v1/events: 401 Unauthorized')`)
	b.exec(t, `INSERT INTO webhook_ingress.reconcile_runs (source, api, window_since, window_until, dry_run, started_at, finished_at, scope, listed, already_stored)
		SELECT 'stripe', 'stripe-events-api', now() - (g + 1) * interval '1 hour', now() - g * interval '1 hour', false,
		       now() - g * interval '1 hour', now() - g * interval '1 hour', 'account=us', 5, 5
		FROM generate_series(168, 1, -1) g`)

	c := b.client(t)
	c.login()
	r := c.get("/dashboard/")
	if r.code != http.StatusOK {
		t.Fatalf("overview: %d\n%s", r.code, r.body)
	}
	for _, source := range []string{"github", "stripe"} {
		rows := reconcileRows(r.body, source)
		if len(rows) == 0 {
			t.Fatalf("no reconcile row for %s", source)
		}
		for _, row := range rows {
			if strings.Contains(row, "error") {
				t.Errorf("%s: %d reconcile rows; one shows an error of a scope no run has listed for days, "+
					"while every round of the source's entries since succeeded:\n%s", source, len(rows), row)
			}
		}
	}
	// The scopes no longer run are listed apart, without the error badge.
	apart := regexp.MustCompile(`(?s)<tr class="reconcile-superseded" data-source="([^"]+)"[^>]*>.*?</tr>`).FindAllStringSubmatch(r.body, -1)
	if len(apart) != 2 {
		t.Fatalf("%d rows listed apart as no longer run, want 2 (github's whole source, stripe's account=eu)", len(apart))
	}
	for _, row := range apart {
		if strings.Contains(row[0], "badge") {
			t.Errorf("a scope no longer run is listed apart with a badge:\n%s", row[0])
		}
	}
	if !strings.Contains(apart[0][0], "whole source") || !strings.Contains(apart[1][0], "account=eu") {
		t.Errorf("the rows listed apart are not github's whole source and stripe's account=eu:\n%s\n%s", apart[0][0], apart[1][0])
	}
}

// TestReconcileTableReadsABoundedNumberOfRuns (review helper-327, fixed).
//
// Defect: the overview's Reconciliation table reads and sorts every
// reconcile_runs row on every load (schema/queries/reconcile.sql
// LatestReconcileRuns: DISTINCT ON (source, coalesce(scope, "")) over the
// whole table, ORDER BY … dry_run, id DESC; no index leads with scope, and
// nothing ever deletes reconcile_runs). Its comment justifies it with "a
// few rows a day per entry", but reconcile.interval may be 1m (backfill
// Section.Validate): 1,440 rows a day per entry, 100,000 in 3 weeks for the
// three entries of the commit's own example (two Stripe accounts, a GitHub
// hook). The landing page of the dashboard then costs a full scan and an
// on-disk sort that grow without bound (measured here: 100,000 runs, 30
// scopes: ~206 ms for the query alone, "external merge Disk: 3568kB",
// against ~1 ms for the 30 rows it shows).
//
// Setup: 100,000 runs over 3 sources x 10 scopes (every 50th a dry run),
// ANALYZEd, autovacuum off on the table; one GET /dashboard/; the rows the
// request read from reconcile_runs, from pg_stat_user_tables (seq_tup_read
// + idx_tup_fetch), polled until the backend flushed its counters.
//
// Expected: the page reads a number of rows bounded by the scopes it shows
// (at most 1,000 here), not by the history.
//
// Observed: 100,030 rows read (every run, then the 30 shown); the page
// took 232-249 ms under -race. Not new in 8ea2259: the per-source query
// before it read and sorted the whole table too (~208 ms here).
//
// Fixed: migration 079 adds idx_reconcile_runs_scope_newest on
// reconcile_runs (source, coalesce(scope, ""), dry_run, id DESC), and
// LatestReconcileRuns reads it as a loose index scan (a recursive CTE
// stepping from one (source, scope) to the next, LIMIT 1 each), then only
// the rows shown. Measured with these 100,000 runs: before, 100,030 rows
// read, the query 169-206 ms (Seq Scan, external merge sort, 3568kB on
// disk), the page 283 ms; after, 60 rows read (30 index probes, 30 rows by
// primary key), the query 0.3-0.8 ms, the page 52 ms (85-119 ms under -race).
// Building the index over the 100,000 rows took 0.2-0.4 s.
func TestReconcileTableReadsABoundedNumberOfRuns(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	ctx := context.Background()
	b.exec(t, `ALTER TABLE webhook_ingress.reconcile_runs SET (autovacuum_enabled = false)`)
	b.exec(t, `INSERT INTO webhook_ingress.reconcile_runs (source, api, window_since, window_until, dry_run, started_at, finished_at, scope, listed, already_stored, by_type)
		SELECT CASE g % 3 WHEN 0 THEN 'stripe' WHEN 1 THEN 'github' ELSE 'acme' END, 'stripe-events-api',
		       now() - interval '1 hour', now(), g % 50 = 0, now(), now(), 'account=a' || (g % 10), 5, 5,
		       '[{"type":"invoice.paid","listed":5,"already_stored":5,"missing":0,"stored":0,"duplicates":0}]'::jsonb
		FROM generate_series(1, 100000) g`)
	b.exec(t, `ANALYZE webhook_ingress.reconcile_runs`)

	read := func() int64 {
		t.Helper()
		var n int64
		if err := b.super.QueryRow(ctx, `SELECT coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0)
			FROM pg_catalog.pg_stat_user_tables WHERE relid = 'webhook_ingress.reconcile_runs'::regclass`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	// Counters are per backend until flushed (PostgreSQL 15+: when idle, at
	// most every few seconds): wait until they stop moving before the request.
	before := read()
	for stable := time.Now(); time.Since(stable) < 3*time.Second; time.Sleep(200 * time.Millisecond) {
		if n := read(); n != before {
			before, stable = n, time.Now()
		}
	}

	c := b.client(t)
	c.login()
	start := time.Now()
	r := c.get("/dashboard/")
	took := time.Since(start)
	if r.code != http.StatusOK {
		t.Fatalf("overview: %d", r.code)
	}
	if n := strings.Count(r.body, `<tr class="reconcile-run"`); n != 30 {
		t.Fatalf("%d reconcile rows, want 30 (3 sources x 10 scopes)", n)
	}
	var after int64
	deadline := time.Now().Add(60 * time.Second)
	for after = read(); after == before && time.Now().Before(deadline); after = read() {
		time.Sleep(200 * time.Millisecond)
	}
	if after == before {
		t.Fatal("the dashboard's reads of reconcile_runs were never flushed to pg_stat_user_tables in 60s")
	}
	// Let a late part of the flush land too.
	time.Sleep(time.Second)
	after = read()
	t.Logf("one overview load read %d rows of reconcile_runs; the page took %v", after-before, took.Round(time.Millisecond))
	if rows := after - before; rows > 1000 {
		t.Errorf("one overview load read %d rows of reconcile_runs (100,000 runs, 30 rows shown; the page took %v): "+
			"the Reconciliation table's cost grows with the whole run history", rows, took.Round(time.Millisecond))
	}
}
