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

// Review helper-202 (this describes the code before the fix). Defect: the
// scheduled reconcile reached back to the latest window_until of any
// completed, non-dry run of the source (LastCompletedReconcileUntil). A
// manual run (`inlet reconcile stripe --since 2h`) is recorded in the same
// reconcile_runs table, so it moved that point forward over a stretch no run
// had compared.
//
// Scenario (interval 1h, window 24h, settle 1h, the defaults): a scheduled
// round completes over a window ending 48h ago; the rounds after it fail
// (Stripe answers 401: the key expired); an operator fixes the key and runs
// a manual reconcile of the last 2h, which completes. The next scheduled
// round reached back only to the manual run's end (now), so it compared
// [now−25h, now−1h]: an event Stripe created 36h ago, whose webhook never
// arrived, was in no compared window and was never stored, against
// operations.md's "no stretch of time goes uncompared".
//
// It failed before the fix (the event was stored 0 times; the runs were
// [now-72h, now-48h ok] [now-48h, now-21h failed] [now-2h, now-0h ok]
// [now-25h, now-1h ok]) and passes since the schedule reaches back to the
// end of the first stretch of completed coverage followed by a gap
// (ReconcileCoveredUntil): the round compares [now−48h, now−1h].
func TestScheduleReachBackIgnoresLaterManualRun(t *testing.T) {
	t.Parallel()
	b := setupReconcile(t)
	now := time.Now()
	lost := reconcileEvent{id: "evt_lost_before_manual_run", typ: "invoice.paid", at: now.Add(-36 * time.Hour)}
	fake := &windowStripe{}
	srv := httptest.NewServer(fake)
	defer srv.Close()
	section := backfill.Section{Enabled: true, Sources: []backfill.ReconcileSource{
		{Source: "stripe", Type: "stripe", APIKey: "sk_test_reconcile", BaseURL: srv.URL}}}.WithDefaults()
	if err := section.Validate(); err != nil {
		t.Fatal(err)
	}

	// Two days ago a scheduled round completes; its window ends at
	// now − 48h, before the event existed.
	runOneRound(t, b, section, func() time.Time { return now.Add(-47 * time.Hour) })

	// The event is created (its webhook is lost); then the scheduled rounds
	// fail: the key expired.
	fake.mu.Lock()
	fake.events = []reconcileEvent{lost}
	fake.failing = true
	fake.mu.Unlock()
	runOneRound(t, b, section, func() time.Time { return now.Add(-20 * time.Hour) })

	// The operator fixes the key and reconciles the last 2h by hand, as
	// `inlet reconcile stripe --since 2h` does; it completes.
	fake.setFailing(false)
	manualSince, manualUntil := now.Add(-2*time.Hour), now
	l, err := backfill.NewStripe(backfill.StripeConfig{APIKey: "sk_test_reconcile", BaseURL: srv.URL, Since: manualSince, Until: manualUntil})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := backfill.Reconcile(context.Background(), b.config("stripe", "stripe", manualSince, manualUntil, false), l); err != nil {
		t.Fatalf("the manual reconcile of the last 2h: %v", err)
	}

	// The next scheduled round.
	runOneRound(t, b, section, time.Now)

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
		runs = append(runs, fmt.Sprintf("[now%+.0fh, now%+.0fh ok=%v]", since.Sub(now).Hours(), until.Sub(now).Hours(), ok))
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	n := b.count(t, `SELECT count(*) FROM webhook_ingress.events WHERE provider = 'stripe' AND external_event_id = $1`, lost.id)
	if n != 1 {
		t.Fatalf("the Stripe event created 36h ago and never delivered was stored %d times (want 1): the scheduled round after a manual run "+
			"did not reach back over the stretch after the last scheduled run that completed; runs: %s", n, strings.Join(runs, " "))
	}
}
