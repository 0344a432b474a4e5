package backfill_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/backfill"
)

// TestScheduleManualRunWithFutureUntilDoesNotHideLaterStretch: a run covers
// at most up to when it started (it listed what existed then), so the
// scheduled reconcile reaches back over the stretch after a manual run whose
// --until lay in the future.
//
// Regression test (review helper-217; this describes the code before the
// fix, and it failed then: the event was stored 0 times). Defect:
// ReconcileCoveredUntil (schema/queries/reconcile.sql, the scheduled
// reconcile's reach-back since 1b42265) took every completed run as having
// compared its whole recorded window [window_since, window_until]. But a run
// can only compare events that existed when it listed them: a run whose
// window_until lies after the time it ran records a coverage of the future
// it never saw. `inlet reconcile` accepted such an --until without a word (a
// date is midnight UTC: `inlet reconcile stripe --since 2026-12-07 --until
// 2026-12-08`, "reconcile today", run on Dec 7 at 10:00; or any RFC 3339
// time ahead), Reconcile records it as is (reconcile.go StartReconcileRun
// with rep.Until), and the schedule then treated the stretch up to that
// future time as compared. When the scheduled rounds after it fail (an
// expired key, a provider outage), the round that finally succeeds reached
// back only to until − window, and an event created after the manual run
// listed, whose webhook was lost, was in no compared window: never stored,
// against operations.md's "no stretch of time goes uncompared".
//
// Scenario (interval 1h, window 24h, settle 1h, the defaults), t = now:
// a scheduled round completes ([t−25h, t−1h]); at t the operator runs a
// manual reconcile with --until t+24h (it completes, recorded as covering
// [t−2h, t+24h]); an event is created at t+10h and its webhook is lost; the
// round at t+12h fails (401); the round at t+40h succeeds and compared only
// [t+15h, t+39h]. The event was stored 0 times. Fixed, the manual run
// covers [t−2h, t] (its end is least(window_until, started_at)), so the
// round at t+40h reaches back to t and stores the event once. (The rounds at
// t+12h and t+40h run on a simulated clock: the database's started_at of
// each is the real t, so they cover nothing, which this test does not rely
// on.)
func TestScheduleManualRunWithFutureUntilDoesNotHideLaterStretch(t *testing.T) {
	t.Parallel()
	b := setupReconcile(t)
	now := time.Now()
	lost := reconcileEvent{id: "evt_created_after_the_manual_run_listed", typ: "invoice.paid", at: now.Add(10 * time.Hour)}
	fake := &windowStripe{}
	srv := httptest.NewServer(fake)
	defer srv.Close()
	section := backfill.Section{Enabled: true, Sources: []backfill.ReconcileSource{
		{Source: "stripe", Type: "stripe", APIKey: "sk_test_reconcile", BaseURL: srv.URL}}}.WithDefaults()
	if err := section.Validate(); err != nil {
		t.Fatal(err)
	}

	// The schedule has been running: a round completes now.
	runOneRound(t, b, section, func() time.Time { return now })

	// The operator reconciles "today" by hand with a date as --until
	// (midnight ahead): recorded as covering up to t+24h. It completes.
	manualSince, manualUntil := now.Add(-2*time.Hour), now.Add(24*time.Hour)
	l, err := backfill.NewStripe(backfill.StripeConfig{APIKey: "sk_test_reconcile", BaseURL: srv.URL, Since: manualSince, Until: manualUntil})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := backfill.Reconcile(context.Background(), b.config("stripe", "stripe", manualSince, manualUntil, false), l); err != nil {
		t.Fatalf("the manual reconcile: %v", err)
	}

	// Later an event is created whose webhook is lost; the rounds after it
	// fail (the key expired).
	fake.mu.Lock()
	fake.events = []reconcileEvent{lost}
	fake.failing = true
	fake.mu.Unlock()
	runOneRound(t, b, section, func() time.Time { return now.Add(12 * time.Hour) })

	// The key is fixed; the next round succeeds.
	fake.setFailing(false)
	runOneRound(t, b, section, func() time.Time { return now.Add(40 * time.Hour) })

	rows, err := b.admin.Query(context.Background(), `SELECT window_since, window_until, error IS NULL FROM webhook_ingress.reconcile_runs ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	var runs []string
	for rows.Next() {
		var since, until time.Time
		var ok bool
		if err := rows.Scan(&since, &until, &ok); err != nil {
			t.Fatal(err)
		}
		runs = append(runs, fmt.Sprintf("[t%+.0fh, t%+.0fh ok=%v]", since.Sub(now).Hours(), until.Sub(now).Hours(), ok))
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	n := b.count(t, `SELECT count(*) FROM webhook_ingress.events WHERE provider = 'stripe' AND external_event_id = $1`, lost.id)
	if n != 1 {
		t.Fatalf("the Stripe event created at t+10h (after the manual run had listed, at t) and never delivered was stored %d times (want 1): "+
			"the manual run's recorded window_until (t+24h, in the future when it ran) counted as compared time, so the round after the failed one "+
			"did not reach back over it; runs: %s", n, strings.Join(runs, " "))
	}
}
