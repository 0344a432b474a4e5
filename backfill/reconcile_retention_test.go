package backfill_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/audit"
	"github.com/inlet-dev/inlet/backfill"
	"github.com/inlet-dev/inlet/retention"
)

// TestReconcileDoesNotRestoreWhatRetentionDropped (review helper-272, fixed).
// Defect: once `inlet retention` drops a period and deletes its dedupe keys
// (retention.Run -> deleteDueKeys), `inlet reconcile` over a window that
// reaches into that period (Stripe lists 30 days; reconcile.window allows
// 720h, and a scheduled round after failed ones reaches back up to 30 days)
// finds each of those events absent from event_keys, counts it "missing",
// and stores it again with a new event id and a new pending job per
// subscribed handler: every handler runs, weeks later, an event it already
// completed, under a new job id, so the job-id idempotency key DESIGN.md
// promises does not catch it. docs/operations.md "inlet reconcile" says it
// stores what "the log lacks"; nothing says a pruned event counts as lacking
// and is re-delivered, nor does either command refuse the overlap.
// Root cause: backfill.Reconcile (backfill/reconcile.go) judges "already
// stored" by event_keys alone, which retention empties for dropped periods
// (schema/queries/retention.sql RetentionDeleteDueKeys).
// Setup: weekly partitions from 3 weeks back; one Stripe event received 15
// days ago, its job completed, sealed; retention with max_age 7d drops its
// period; Reconcile over [now-20d, now] against a fake Stripe API that lists
// that event (created 15 days ago).
// Expected: the pruned event is not stored again (counted as already seen,
// or the window refused/clamped to the retained log); no new job.
// Observed: Missing 1, Stored 1; a new events row and a new pending job of
// handler billing for evt_review272_pruned.
// Fixed: Reconcile reads the end of the newest period retention dropped
// (retention_log, RetentionDroppedThrough; migration 074 lets the ingress
// role read period_end) when it starts and with each page, and compares and
// stores nothing older: the window starts there, recorded so in
// reconcile_runs, the part left out reported in Report.Skipped (--json
// "skipped", stderr, the schedule's log line); a window wholly before it is
// ErrWindowDropped with no run recorded. The schedule's coverage ignores the
// time before it (TestScheduleReachBackStopsAtRetainedLog).
// Files: backfill/reconcile.go, streamer reconcile schedule
// (cmd/inlet/reconcileschedule.go), docs/operations.md.
func TestReconcileDoesNotRestoreWhatRetentionDropped(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b, ev, now, kept := setupDroppedLog(t)

	fake := &listStripe{events: []reconcileEvent{ev}, pageSize: 10}
	srv := httptest.NewServer(fake)
	defer srv.Close()
	since, until := now.Add(-20*24*time.Hour), now
	l, err := backfill.NewStripe(backfill.StripeConfig{APIKey: "sk_test_reconcile", BaseURL: srv.URL, Since: since, Until: until})
	if err != nil {
		t.Fatal(err)
	}
	run, err := backfill.Reconcile(ctx, b.config("stripe", "stripe", since, until, false), l)
	if err != nil {
		t.Fatal(err)
	}
	events := b.count(t, `SELECT count(*) FROM webhook_ingress.events WHERE external_event_id = $1`, ev.id)
	open := b.count(t, `SELECT count(*) FROM webhook_ingress.jobs WHERE handler = 'billing' AND status IN ('pending', 'failed', 'leased')`)
	if events != 0 || open != 0 {
		t.Fatalf("reconcile after retention dropped %s (delivered and completed 15 days ago): counts %+v; %d events row(s) stored again, %d new open billing job(s): the handler runs it a second time under a new job id",
			ev.id, run.Total, events, open)
	}

	// The window starts at the retained log, recorded so (the dropped part
	// is not claimed compared), and the part left out is reported.
	if want := (backfill.Skipped{Since: since, Until: kept, Reason: backfill.SkippedRetention}); run.Skipped == nil || !run.Skipped.Since.Equal(want.Since) ||
		!run.Skipped.Until.Equal(want.Until) || run.Skipped.Reason != want.Reason {
		t.Errorf("report's skipped part = %+v, want %+v", run.Skipped, want)
	}
	if !run.Since.Equal(kept) || run.Total != (backfill.Counts{}) {
		t.Errorf("report: since %s, counts %+v; want since %s (the end of the newest dropped period) and nothing listed", run.Since, run.Total, kept)
	}
	var recorded time.Time
	if err := b.admin.QueryRow(ctx, `SELECT window_since FROM webhook_ingress.reconcile_runs WHERE id = $1`, run.RunID).Scan(&recorded); err != nil {
		t.Fatal(err)
	}
	if !recorded.Equal(kept) {
		t.Errorf("run %d recorded window_since %s, want %s: the dropped part was not compared", run.RunID, recorded, kept)
	}
}

// setupDroppedLog is a log whose partitions start three weeks back, with a
// Stripe event delivered 15 days ago (handler billing completed it, sealed)
// whose period inlet retention (max_age 7d) then dropped, with its dedupe
// key. It returns the event, now, and the end of the newest dropped period.
func setupDroppedLog(t *testing.T) (b *reconcileBundle, ev reconcileEvent, now, kept time.Time) {
	t.Helper()
	ctx := context.Background()
	b = setupReconcile(t)
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := b.admin.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	// Start the log three weeks back, as the retention tests do.
	exec(`SELECT webhook_ingress.drop_partition(period_start) FROM webhook_ingress.partitions()`)
	exec(`SELECT webhook_ingress.create_partitions('week', 2, now() - interval '21 days')`)
	b.subscribe(t, "billing", "stripe")

	now = time.Now().UTC().Truncate(time.Second)
	ev = reconcileEvent{id: "evt_review272_pruned", typ: "invoice.paid", at: now.Add(-15 * 24 * time.Hour)}
	// Delivered 15 days ago (the owner backdates received_at, as ingress
	// would have stored it then), handled, sealed.
	exec(`INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, event_type, headers, raw_body, signature_verified, received_at)
		VALUES ('stripe', 'stripe', $1, $2, '{"X-Delivered": ["1"]}', convert_to($3, 'UTF8'), true, $4)`, ev.id, ev.typ, stripeEventJSON(ev), ev.at)
	exec(`UPDATE webhook_ingress.jobs SET status = 'completed', attempt_count = 1, attempted_at = now(), completed_at = now(),
		completed_attempt_id = nextval('webhook_ingress.job_attempts_id_seq'), worker_id = 'c1', updated_at = now()`)
	s, err := audit.NewSealer(audit.Config{DB: b.admin, Grace: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond)
	if _, err := s.Seal(ctx); err != nil && !errors.Is(err, audit.ErrNothingToSeal) {
		t.Fatal(err)
	}
	rep, err := retention.Run(ctx, b.admin, retention.Options{MaxAge: 7 * 24 * time.Hour, Interval: "week", Ahead: 2})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Dropped() == 0 || b.count(t, `SELECT count(*) FROM webhook_ingress.events`) != 0 {
		t.Fatalf("retention dropped %d periods; the event's period must be gone first: %+v", rep.Dropped(), rep.Partitions)
	}
	if err := b.admin.QueryRow(ctx, `SELECT max(period_end) FROM webhook_ingress.retention_log WHERE period_end <= dropped_at`).Scan(&kept); err != nil {
		t.Fatal(err)
	}
	if !kept.After(ev.at) || !kept.Before(now) {
		t.Fatalf("the newest dropped period ends %s: want after the event (%s) and before now", kept, ev.at)
	}
	return b, ev, now, kept
}

// A window wholly before the end of the newest dropped period compares
// nothing, records no run, and says why (ErrWindowDropped; the command
// exits 2 with it).
func TestReconcileRefusesAWindowRetentionDropped(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b, ev, now, kept := setupDroppedLog(t)
	fake := &listStripe{events: []reconcileEvent{ev}, pageSize: 10}
	srv := httptest.NewServer(fake)
	defer srv.Close()
	since, until := now.Add(-20*24*time.Hour), kept.Add(-time.Hour)
	l, err := backfill.NewStripe(backfill.StripeConfig{APIKey: "sk_test_reconcile", BaseURL: srv.URL, Since: since, Until: until})
	if err != nil {
		t.Fatal(err)
	}
	run, err := backfill.Reconcile(ctx, b.config("stripe", "stripe", since, until, false), l)
	if !errors.Is(err, backfill.ErrWindowDropped) {
		t.Fatalf("reconcile of [%s, %s], before the retained log (from %s): %v, want ErrWindowDropped", since, until, kept, err)
	}
	if run.RunID != 0 || run.Skipped == nil || !run.Skipped.Until.Equal(until) || len(fake.queries) != 0 {
		t.Errorf("report %+v skipped %+v, %d API requests: want no run, the whole window skipped, no request", run, run.Skipped, len(fake.queries))
	}
	if n := b.count(t, `SELECT count(*) FROM webhook_ingress.reconcile_runs`); n != 0 {
		t.Errorf("%d runs recorded, want none", n)
	}
}

// The scheduled reconcile reaches back over an uncompared stretch only as
// far as the retained log: the completed runs ended before the newest
// dropped period's end (the rounds since failed, then retention dropped
// it); the round compares from that end, storing what is missing after it
// and nothing before it, and the round after it reaches back no more (the
// dropped time is not a gap to close: without that, every round would list
// from there again, for ever).
func TestScheduleReachBackStopsAtRetainedLog(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b, pruned, now, kept := setupDroppedLog(t)
	// A completed run of the whole source ended before the dropped period
	// did; nothing was compared since.
	if _, err := b.admin.Exec(ctx, `INSERT INTO webhook_ingress.reconcile_runs (source, api, window_since, window_until, finished_at, dry_run)
		VALUES ('stripe', 'stripe-events-api', $1, $2, now(), false)`, pruned.at.Add(-48*time.Hour), pruned.at.Add(-24*time.Hour)); err != nil {
		t.Fatal(err)
	}
	lost := reconcileEvent{id: "evt_lost_after_kept", typ: "invoice.paid", at: kept.Add(time.Hour)}
	fake := &windowStripe{events: []reconcileEvent{lost, pruned}}
	srv := httptest.NewServer(fake)
	defer srv.Close()
	section := backfill.Section{Enabled: true, Sources: []backfill.ReconcileSource{
		{Source: "stripe", Type: "stripe", APIKey: "sk_test_reconcile", BaseURL: srv.URL}}}.WithDefaults()
	if err := section.Validate(); err != nil {
		t.Fatal(err)
	}

	runOneRound(t, b, section, func() time.Time { return now })
	runOneRound(t, b, section, func() time.Time { return now.Add(time.Hour) })

	if n := b.count(t, `SELECT count(*) FROM webhook_ingress.events WHERE external_event_id = $1`, pruned.id); n != 0 {
		t.Errorf("the event retention dropped (handled 15 days ago) was stored again %d times", n)
	}
	if n := b.count(t, `SELECT count(*) FROM webhook_ingress.events WHERE external_event_id = $1`, lost.id); n != 1 {
		t.Errorf("the event created after the retained log's start and never delivered was stored %d times, want 1", n)
	}
	rows, err := b.admin.Query(ctx, `SELECT window_since FROM webhook_ingress.reconcile_runs WHERE finished_at IS NOT NULL AND error IS NULL ORDER BY id OFFSET 1`)
	if err != nil {
		t.Fatal(err)
	}
	var starts []time.Time
	for rows.Next() {
		var at time.Time
		if err := rows.Scan(&at); err != nil {
			t.Fatal(err)
		}
		starts = append(starts, at)
	}
	rows.Close()
	settle := *section.Settle
	want := []time.Time{kept, now.Add(time.Hour - settle - section.Window)}
	if len(starts) != 2 || !starts[0].Equal(want[0]) || !starts[1].Equal(want[1]) {
		t.Fatalf("the scheduled rounds started at %v, want %v: the first from the retained log's start, the next its own window", starts, want)
	}
	if n := b.count(t, `SELECT count(*) FROM webhook_ingress.reconcile_runs WHERE error IS NOT NULL`); n != 0 {
		t.Errorf("%d failed runs recorded", n)
	}
}

// A period retention drops while a run lists is left out from the next
// page on: the end of the newest dropped period is read again with each
// page, and the run stores nothing before it.
func TestReconcileStopsAtAPeriodDroppedDuringTheRun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b, _, now, kept := setupDroppedLog(t)
	// The next week, [kept, kept+7d), has ended (retention's max_age 7d
	// dropped every period that ended before now − 7d).
	next := kept.Add(7 * 24 * time.Hour)
	fresh := reconcileEvent{id: "evt_fresh", typ: "invoice.paid", at: now}
	doomed := reconcileEvent{id: "evt_in_dropped_week", typ: "invoice.paid", at: kept.Add(time.Hour)}
	fake := &listStripe{events: []reconcileEvent{fresh, doomed}, pageSize: 1}
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
	since, until := now.Add(-20*24*time.Hour), now
	l, err := backfill.NewStripe(backfill.StripeConfig{APIKey: "sk_test_reconcile", BaseURL: srv.URL, Since: since, Until: until})
	if err != nil {
		t.Fatal(err)
	}
	run, err := backfill.Reconcile(ctx, b.config("stripe", "stripe", since, until, false), l)
	if err != nil {
		t.Fatal(err)
	}
	if !dropped.Load() {
		t.Fatal("the run read one page only")
	}
	if n := b.count(t, `SELECT count(*) FROM webhook_ingress.events WHERE external_event_id = $1`, doomed.id); n != 0 {
		t.Errorf("the event of the week dropped during the run was stored %d times, want 0", n)
	}
	if n := b.count(t, `SELECT count(*) FROM webhook_ingress.events WHERE external_event_id = $1`, fresh.id); n != 1 {
		t.Errorf("the missing event listed first was stored %d times, want 1", n)
	}
	if run.Skipped == nil || !run.Skipped.Until.Equal(next) || !run.Since.Equal(kept) || run.Total.Listed != 1 {
		t.Errorf("report since %s, skipped %+v, counts %+v; want since %s, skipped up to %s, one listed", run.Since, run.Skipped, run.Total, kept, next)
	}
}
