package reporter_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/internal/testwait"
	"github.com/inlet-dev/inlet/reporter"
)

// TestGapRowsAboveTheBudgetDoNotExpireWhileDraining: every attempt of a
// late transaction that commits within GapTTL is reported, however many
// more attempts it holds than the reporter drains before GapTTL runs out (a
// budget of half a batch a round).
//
// Regression test (review helper-217; this describes the code before the
// fix, and it failed then: 9 of 31 records). Defect: a late transaction
// that commits well within GapTTL still loses attempts when its gap holds
// more rows than the reporter can drain before the gap's GapTTL runs out.
// readGaps (reporter.go, since 0e07a62) reads at most BatchSize/2 rows of
// the gaps a round; what lies above the last id read "stays a gap" — but
// with the gap's original `since` (addGaps(next, g.lo, g.hi, read, g.since,
// ...)), so it keeps ageing while the reporter is busy reporting the lower
// part of the very same gap (rounds that follow at once through r.more, each
// a POST to the control plane). When GapTTL passes, the rest of the run is
// dropped (readGaps' `now.Sub(g.since) <= GapTTL` filter) although its rows
// were committed, visible, and found by the look that filled the budget:
// they are never reported (the cursor is past them). The chunks skipped for
// want of budget aged the same way.
//
// docs/operations.md ("Control plane (optional)") promises: "An attempt
// whose transaction commits after a later one's is picked up for 10 minutes
// by a running reporter, however many attempts that transaction holds (a
// reaper pass, a replay of many dead letters) ... the next look follows at
// once while late attempts keep turning up", and reporter.go's clock comment
// that a gap ages only while the reporter can look for it. Here the part of
// the run above the budget's cut is not looked at in those rounds, yet aged.
//
// Scenario (the shape of batch_size 500, GapTTL 10m, a replay of many
// thousand dead letters committing a few minutes before the 10 minutes end,
// with a control plane a WAN round trip away): batch_size 2 (one gap row a
// round), GapTTL 2s, a control plane answering each report after 250 ms; a
// transaction writes 30 attempts (one run of ids), a completion commits
// after it and is reported (the cursor passes the run), then the
// transaction commits at once, ~2s before the run's TTL. Only ~8 of the 30
// were reported; the rest were lost for good. Fixed, the part of a run
// above the budget's cut (and a chunk skipped for want of budget) ages from
// the round that left it unread.
func TestGapRowsAboveTheBudgetDoNotExpireWhileDraining(t *testing.T) {
	t.Parallel()
	d, cp := newDataPlane(t), newControlPlane(t)
	ctx := context.Background()

	// A control plane 250 ms away (each report answered after 250 ms).
	target, err := url.Parse(cp.url)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	slowCP := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			time.Sleep(250 * time.Millisecond)
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(slowCP.Close)

	const k = 30
	slow := d.job(t)
	fast := d.job(t)
	// One transaction (a reaper pass, a replay) draws k ids in one run...
	tx, err := d.super.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(ctx) })
	for i := range k {
		if _, err := tx.Exec(ctx, insertAttempt, slow, i+1, nil, time.Now(), "lease_expired", "lease_expired", "lease expired"); err != nil {
			t.Fatal(err)
		}
	}
	// ...and a completion after it commits first.
	d.complete(t, d.super, fast, 1)

	const ttl = 2 * time.Second
	startReporter(t, d, cp, func(c *reporter.Config) {
		c.URL = slowCP.URL
		c.BatchSize, c.Interval, c.GapTTL = 2, 30*time.Millisecond, ttl
	})
	cp.waitStored(t, 1) // the cursor passed the k late ids: one gap
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	committed := time.Now()

	want := d.attemptIDs(t)
	var got []int64
	// Fixed, the k rows take about k × 250 ms to drain.
	testwait.Eventually(t, ttl+k*400*time.Millisecond, "all attempts reported", func() (bool, string) {
		got = got[:0]
		for _, r := range cp.rows(t) {
			got = append(got, r.attemptID)
		}
		return len(got) == len(want), fmt.Sprintf("%d of %d records", len(got), len(want))
	})
	if !slices.Equal(got, want) {
		t.Fatalf("control plane holds %d attempts, data plane has %d: the late transaction committed %s after the cursor passed it, "+
			"within GapTTL %s, but its run was dropped at GapTTL while being drained one budget a round",
			len(got), len(want), time.Since(committed).Round(time.Millisecond), ttl)
	}
}
