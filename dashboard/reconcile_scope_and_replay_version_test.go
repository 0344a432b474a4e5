package dashboard_test

import (
	"context"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/admin"
)

// TestReconcileFailureOfOneEntryIsNotHiddenByAnother (review helper-321, fixed).
//
// Defect: the overview's Reconciliation table shows one row per source, the
// source's newest reconcile_runs row (schema/queries/reconcile.sql
// LatestReconcileRuns: DISTINCT ON (source) … ORDER BY source, id DESC, read
// by dashboard/reconcile.go loadReconcileRuns). docs/operations.md documents
// several reconcile.sources entries feeding one source (two Stripe accounts
// labelled account: us / account: eu, more than 20 types split over
// entries, several GitHub hooks into one github source), each listing its
// own scope and covering only it (migration 071). When one entry fails on
// every round (its API key revoked: 401) and another entry of the same
// source succeeds after it, the failing entry's runs are never the newest
// row of the source: the dashboard shows "ok" for the source and no error
// anywhere, while that entry's events go uncompared for good. The table
// also does not say which entry (scope) the row it shows belongs to. The
// operator's one view of reconcile health ("the last reconcile run of each
// source (window, missing, stored, error)") hides exactly the failure it
// exists to show.
//
// Setup: two runs of source stripe as the scheduled reconcile records them
// for two entries: scope 'account=eu' finished with error
// "GET /v1/events: 401 Unauthorized", then scope 'account=us' finished ok
// (listed 5, missing 0).
//
// Expected: the overview shows the eu entry's failed run (its error), e.g.
// one row per (source, scope), or at least the source flagged as erroring.
//
// Observed: one row for stripe, data-missing="0", result "ok"; the text
// "401 Unauthorized" appears nowhere on the page; the scope is not shown.
//
// Fixed: LatestReconcileRuns gives one row per (source, scope), NULL and
// the empty scope as one, each the scope's newest run that is not a dry run
// (a scope with dry runs only shows its newest, marked dry run); the
// overview's Reconciliation table has a Scope column.
func TestReconcileFailureOfOneEntryIsNotHiddenByAnother(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	b.exec(t, `INSERT INTO webhook_ingress.reconcile_runs (source, api, window_since, window_until, dry_run, finished_at, scope, error)
		VALUES ('stripe', 'stripe-events-api', now() - interval '1 hour', now() - interval '5 minutes', false, now(), 'account=eu', 'GET /v1/events: 401 Unauthorized')`)
	b.exec(t, `INSERT INTO webhook_ingress.reconcile_runs (source, api, window_since, window_until, dry_run, finished_at, scope, listed, already_stored)
		VALUES ('stripe', 'stripe-events-api', now() - interval '1 hour', now() - interval '5 minutes', false, now(), 'account=us', 5, 5)`)
	c := b.client(t)
	c.login()
	r := c.get("/dashboard/")
	if r.code != http.StatusOK {
		t.Fatalf("overview: %d\n%s", r.code, r.body)
	}
	rows := strings.Count(r.body, `<tr class="reconcile-run" data-source="stripe"`)
	if !strings.Contains(r.body, "401 Unauthorized") {
		t.Errorf("the reconcile entry account=eu of source stripe failed on its last run (401 Unauthorized), "+
			"but the overview shows %d reconcile row(s) for stripe and no error: the later successful run of entry account=us hides it", rows)
	}
	if !strings.Contains(r.body, "account=eu") {
		t.Errorf("the overview does not name the entry (scope) of any reconcile row shown: %d row(s) for stripe, none for account=eu", rows)
	}
}

// TestStaleReplayButtonRefusesAJobReplayedAndCompletedMeanwhile (review helper-321, fixed).
//
// Defect: the Replay button guards against a stale page by the job's status
// alone (templates/layout.html "replay" form field expect_status, checked in
// admin/replay.go against the locked row's status). docs/operations.md
// promises: "pressed on a stale page, the job replayed or finished
// meanwhile, it is refused". A completed job's status is the same before and
// after someone else's replay has run it again (completed → pending →
// completed: an ABA), so the stale button passes the check and the handler
// runs the event a third time: a second operator (or the CLI, or another
// tab) re-ran it, the first operator's page still shows the first
// completion, and their press re-runs side effects (a payment, an e-mail)
// nobody asked to repeat. Root cause: dashboard/pages.go replay and the
// "replay" template carry no version of the job (its completed_attempt_id,
// attempt or replay count, updated_at), only its status.
//
// Setup: a completed job; the event page is rendered (its Replay form
// carries expect_status=completed); then admin.Replay re-queues the job and
// the consumer completes it again (b.complete: a new completed_attempt_id);
// then the stale form is posted.
//
// Expected: refused ("Not replayed: … replayed meanwhile"), the job stays
// completed, one replay marker.
//
// Observed: 303 with "Job N re-queued.", the job pending again, 2 replay
// markers.
//
// Fixed: the form carries the job's replay count (expect_replays: its
// replay markers, admin.Job.Replays / admin.DeadLetter.Replays), which
// every replay raises, and admin.Replay compares it
// (ReplayRequest.ExpectReplays) on the locked row beside ExpectStatus,
// refusing with ErrConflict ("replayed meanwhile (replay count 1 now, 0
// when asked): it is completed now").
func TestStaleReplayButtonRefusesAJobReplayedAndCompletedMeanwhile(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	b.subscribe(t, "billing", "stripe")
	ev := b.insert(t, "stripe", "evt_aba", []byte(`{"id":"evt_aba"}`), b.now.Add(-time.Hour))
	job := b.jobID(t, ev, "billing")
	b.complete(t, job, b.now.Add(-30*time.Minute))

	c := b.client(t)
	c.login()
	path := fmt.Sprintf("/dashboard/events/%d", ev)
	stale := replayForm(c.get(path).body, job)
	if stale == nil || stale.Get("expect_status") != "completed" {
		t.Fatalf("the event page's replay form of a completed job: %v", stale)
	}
	// Meanwhile someone else replays it and its handler completes it again.
	if _, err := admin.Replay(context.Background(), b.op, admin.ReplayRequest{JobID: job}); err != nil {
		t.Fatal(err)
	}
	b.complete(t, job, b.now.Add(-time.Minute))
	if s := b.status(t, job); s != "completed" {
		t.Fatalf("setup: job %s, want completed", s)
	}

	r := c.do("POST", "/dashboard/replay", stale, c.sameOrigin())
	var markers int
	if err := b.super.QueryRow(context.Background(),
		`SELECT count(*) FROM webhook_ingress.job_attempts WHERE job_id = $1 AND outcome = 'replayed'`, job).Scan(&markers); err != nil {
		t.Fatal(err)
	}
	flashMsg := ""
	if m := regexp.MustCompile(`role="status">([^<]*)<`).FindStringSubmatch(c.get(path).body); m != nil {
		flashMsg = m[1]
	}
	if s := b.status(t, job); s != "completed" || markers != 1 {
		t.Fatalf("the stale Replay button (rendered before someone else's replay ran the job again) re-queued it: "+
			"answer %d, flash %q, job now %s, %d replay markers (want refused, completed, 1)", r.code, flashMsg, s, markers)
	}
	if !strings.Contains(flashMsg, "Not replayed") || !strings.Contains(flashMsg, "replayed meanwhile") {
		t.Errorf("the refused replay says %q, want Not replayed: … replayed meanwhile", flashMsg)
	}
	// The page rendered now carries the new count, and its button works.
	fresh := replayForm(c.get(path).body, job)
	if fresh == nil || fresh.Get("expect_replays") != "1" {
		t.Fatalf("the event page's replay form after one replay: %v, want expect_replays=1", fresh)
	}
	if r := c.do("POST", "/dashboard/replay", fresh, c.sameOrigin()); r.code != http.StatusSeeOther || b.status(t, job) != "pending" {
		t.Fatalf("replay from a current page: %d, job %s, want 303 and pending", r.code, b.status(t, job))
	}
}

// The Reconciliation table's rows per scope: a dry run never hides the
// scope's last real run (it stores nothing and covers nothing), a scope with
// dry runs only shows its newest dry run, marked so, and a run recorded
// without a scope (NULL, before migration 071) and one with the empty scope
// are the same scope, the whole source.
func TestReconcileDryRunDoesNotHideTheLastRealRun(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	run := func(scope, dry, errText string, listed int) {
		t.Helper()
		b.exec(t, `INSERT INTO webhook_ingress.reconcile_runs (source, api, window_since, window_until, dry_run, finished_at, scope, error, listed, already_stored)
			VALUES ('stripe', 'stripe-events-api', now() - interval '1 hour', now() - interval '5 minutes', `+dry+`, now(), `+scope+`, `+errText+`, $1, $1)`, listed)
	}
	run("NULL", "false", "'GET /v1/events: 401 Unauthorized'", 0)
	run("''", "false", "'GET /v1/events: 403 Forbidden'", 0) // the same scope as NULL, newer
	run("NULL", "true", "NULL", 7)                           // a dry run after it, fine
	run("'account=us'", "false", "NULL", 5)
	run("'account=us'", "true", "'GET /v1/events: 500'", 0) // a failed dry run after the real one
	run("'account=eu'", "true", "NULL", 3)                  // dry runs only

	c := b.client(t)
	c.login()
	r := c.get("/dashboard/")
	if r.code != http.StatusOK {
		t.Fatalf("overview: %d\n%s", r.code, r.body)
	}
	rowRe := regexp.MustCompile(`(?s)<tr class="reconcile-run" data-source="stripe"[^>]*>.*?</tr>`)
	rows := rowRe.FindAllString(r.body, -1)
	if len(rows) != 3 {
		t.Fatalf("%d reconcile rows for stripe, want 3 (the whole source, account=eu, account=us):\n%s", len(rows), strings.Join(rows, "\n"))
	}
	for i, want := range []struct{ scope, has, hasNot string }{
		{"whole source", "403 Forbidden", "dry run"},
		{"account=eu", "(dry run)", "error"},
		{"account=us", "ok", "dry run"},
	} {
		row := rows[i]
		if !strings.Contains(row, want.scope) || !strings.Contains(row, want.has) || strings.Contains(row, want.hasNot) {
			t.Errorf("row %d: want scope %q with %q and without %q:\n%s", i, want.scope, want.has, want.hasNot, row)
		}
	}
	if strings.Contains(r.body, "401 Unauthorized") || strings.Contains(r.body, "GET /v1/events: 500") {
		t.Error("the overview shows an older run, or a dry run beside its scope's real one")
	}
}
