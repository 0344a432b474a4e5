package backfill

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"
)

// TestFreshDelivery404IsNotTakenForAgedOut (review helper-303, fixed).
// Defect: since 29b53ca every 404/410 on GET …/deliveries/{id} is taken for
// "aged out of GitHub's ~3-day history between the list and the fetch" and
// the delivery is skipped for good, whatever its age. The list has just said
// when each delivery was made (delivered_at); a delivery made an hour ago
// cannot have aged out of a 3-day history, so its 404 is something else (a
// token or App installation whose access to the hook changed, the 404 GitHub
// gives for any permission problem, a transient API error): the run takes
// every such delivery for gone, saves its cursor past their page, reports
// success and removes its state file, so `inlet backfill github` (and
// `inlet reconcile github`, exit 0) says the backfill is done with nothing
// stored, "N gone from the provider", while every delivery is still there
// to fetch. The operator has no reason to run it again; the deliveries the
// backfill was run for are never stored. Root cause: backfill/github.go:
// GitHub.delivery maps any final 404/410 to goneError without checking the
// listed delivered_at (or re-checking that the hook still lists it), and
// backfill/backfill.go:Run and reconcile.go:storeMissing skip it.
// Setup: fake GitHub hook (GitHub's shapes, r296GitHub) listing 4 deliveries
// delivered 1 hour ago, 2 a page; while the run lists them every single-
// delivery fetch answers GitHub's 404 {"message":"Not Found"}; then the
// fetches answer again (access restored) and the same command is run again
// while it fails (at most 3 runs), as the CLI advises. The same with
// Reconcile over the last 2 hours in a second database.
// Expected: a 404 for a delivery far inside GitHub's history stops the run
// (cursor not moved past its page) or is checked, so the run after access
// is back stores all 4; reconcile does not complete claiming them gone.
// Observed: run 1 returns nil: "2 pages, 4 events seen: 0 stored, 0
// duplicates, 4 skipped (4 gone from the provider before their fetch)",
// state file removed; 0 of the 4 deliveries stored; Reconcile returns nil
// with {Listed:4 Missing:4 Stored:0 Gone:4}, its run recorded finished
// without error.
// Fixed: GitHub.delivery takes a 404/410 for gone only for a delivery
// listed as made more than 2 days ago (githubAgesOutAfter); a more recent
// one's stops the run, its page's cursor unsaved, the error saying to check
// the token, and reconcile records the run failed.
func TestFreshDelivery404IsNotTakenForAgedOut(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ids := []int64{1004, 1003, 1002, 1001}
	all404 := func() map[int64]bool {
		m := map[int64]bool{}
		for _, id := range ids {
			m[id] = true
		}
		return m
	}

	// Backfill.
	b := r296Setup(t)
	fake := &r296GitHub{deliveries: ids, pageSize: 2, gone: all404()}
	srv := httptest.NewServer(fake)
	defer srv.Close()
	l, err := NewGitHub(GitHubConfig{Token: "ghp_review296", BaseURL: srv.URL, Repo: "acme/widgets", HookID: 42})
	if err != nil {
		t.Fatal(err)
	}
	first, firstErr := Run(ctx, b.config("github", "github"), l)
	_, stateErr := os.Stat(b.state)
	fake.mu.Lock()
	fake.gone = nil // access back: every delivery answers again
	n404 := fake.fetched404
	fake.mu.Unlock()
	runs := []string{fmt.Sprintf("run 1: %v (%s); state file after it: %v", firstErr, first, stateErr)}
	for run := 2; run <= 3 && firstErr != nil; run++ {
		st, err := Run(ctx, b.config("github", "github"), l)
		runs = append(runs, fmt.Sprintf("run %d: %v (%s)", run, err, st))
		if err == nil {
			break
		}
	}
	stored := b.count(t, `SELECT count(*) FROM webhook_ingress.events WHERE provider = 'github'`)
	if stored != len(ids) {
		t.Errorf("backfill: deliveries delivered 1 hour ago answered 404 (%d fetches) while listed: %d of %d stored after the runs:\n  %s\n"+
			"a 404 for a delivery far inside GitHub's ~3-day history was taken for aged out and skipped for good",
			n404, stored, len(ids), strings.Join(runs, "\n  "))
	}

	// Reconcile.
	rb := r296Setup(t)
	rfake := &r296GitHub{deliveries: ids, pageSize: 2, gone: all404()}
	rsrv := httptest.NewServer(rfake)
	defer rsrv.Close()
	rl, err := NewGitHub(GitHubConfig{Token: "ghp_review296", BaseURL: rsrv.URL, Repo: "acme/widgets", HookID: 42})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	rep, rerr := Reconcile(ctx, ReconcileConfig{Source: "github", Scheme: "github", Store: rb.store, DB: rb.pool,
		Since: now.Add(-2 * time.Hour), Until: now, MaxRetries: 2, Backoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond}, rl)
	if rerr == nil && rep.Total.Gone > 0 {
		var finished bool
		var runErr *string
		if err := rb.admin.QueryRow(ctx, `SELECT finished_at IS NOT NULL, error FROM webhook_ingress.reconcile_runs WHERE id = $1`, rep.RunID).Scan(&finished, &runErr); err != nil {
			t.Fatal(err)
		}
		t.Errorf("reconcile: deliveries delivered 1 hour ago answered 404: the run completed without error, counts %+v "+
			"(run %d finished %t, error %v): %d deliveries reported gone from GitHub, none stored",
			rep.Total, rep.RunID, finished, runErr, rep.Total.Gone)
	}
}
