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

// windowStripe is a fake Stripe GET /v1/events that honours created[gte] and
// created[lte] as Stripe does (newest first, starting_after, has_more), and
// answers 401 while failing is set (an expired or rotated API key; a long
// provider outage fails the rounds the same way).
type windowStripe struct {
	mu      sync.Mutex
	events  []reconcileEvent // newest first
	failing bool
}

func (f *windowStripe) setFailing(v bool) {
	f.mu.Lock()
	f.failing = v
	f.mu.Unlock()
}

func (f *windowStripe) ServeHTTP(w http.ResponseWriter, r *http.Request) {
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
	var in []reconcileEvent
	for _, e := range f.events {
		if s := e.at.Unix(); s >= gte && s <= lte {
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

// runOneRound runs a Schedule (one streamer process) until it has finished
// one more reconcile_runs row, then stops it, as a restart or a failover
// does.
func runOneRound(t *testing.T, b *reconcileBundle, section backfill.Section, now func() time.Time) {
	t.Helper()
	before := b.count(t, `SELECT count(*) FROM webhook_ingress.reconcile_runs WHERE finished_at IS NOT NULL`)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		backfill.Schedule(ctx, backfill.ScheduleConfig{Section: section, Store: b.store, DB: b.pool, Leader: alwaysLeader{},
			Metrics: b.metrics, Now: now})
	}()
	testwait.Eventually(t, 60*time.Second, "the process's first round finished", func() (bool, string) {
		n := b.count(t, `SELECT count(*) FROM webhook_ingress.reconcile_runs WHERE finished_at IS NOT NULL`)
		return n > before, fmt.Sprintf("%d finished runs", n)
	})
	cancel()
	<-done
}

// Review helper-191 (this describes the code before the fix). Defect: the
// scheduled reconcile's "reach back to where the source's last completed
// run ended" lives only in the memory of one streamer process
// (backfill/schedule.go:57, done := map[string]time.Time{}, consulted at
// schedule.go:83 and set at :102), although every run, its window and its
// outcome are recorded in webhook_ingress.reconcile_runs. A streamer restart
// (a deploy), or a failover to another replica ("when it dies, another takes
// over at its next round", operations.md), forgets it: the next round
// compares only the default window [now − settle − window, now − settle].
//
// Scenario (interval 1h, window 24h, settle 1h, the defaults): a round
// completes over a window ending 48h ago; the rounds after it fail (Stripe
// answers 401: the key expired; an outage does the same), each failure recorded in
// reconcile_runs; the streamer is then restarted (a deploy that also fixes
// the key). The first round of the new process compares [now−25h, now−1h]
// only. An event Stripe created 36h ago whose webhook never arrived is in no
// compared window: it is never stored, never counted missing, and
// inlet_reconcile_missing_total never moves.
//
// Expected (operations.md, "Reconciliation with the provider"): "A run that
// starts late ... or follows a failed one reaches back to where the source's
// last completed run ended, so no stretch of time goes uncompared." The
// round after the restart should reach back to the end of the last completed
// (non-dry-run, error-free) run recorded in reconcile_runs and store the
// 36h-old event.
//
// It failed before the fix (the event was stored 0 times; the runs were
// [now-72h, now-48h ok] [now-45h, now-21h failed] [now-25h, now-1h ok]) and
// passes since scheduledRound reads the end of the source's last completed
// run from reconcile_runs (ReconcileCoveredUntil) each round.
func TestScheduleReachBackSurvivesRestart(t *testing.T) {
	t.Parallel()
	b := setupReconcile(t)
	now := time.Now()
	lost := reconcileEvent{id: "evt_lost_in_gap", typ: "invoice.paid", at: now.Add(-36 * time.Hour)}
	fake := &windowStripe{events: []reconcileEvent{lost}}
	srv := httptest.NewServer(fake)
	defer srv.Close()
	section := backfill.Section{Enabled: true, Sources: []backfill.ReconcileSource{
		{Source: "stripe", Type: "stripe", APIKey: "sk_test_reconcile", BaseURL: srv.URL}}}.WithDefaults()
	if err := section.Validate(); err != nil {
		t.Fatal(err)
	}

	// Process A, two days ago: a round completes, its window ends at
	// now − 48h (before the event existed: nothing is listed).
	// (The event does not exist yet: the list is empty.)
	fake.mu.Lock()
	fake.events = nil
	fake.mu.Unlock()
	runOneRound(t, b, section, func() time.Time { return now.Add(-47 * time.Hour) })

	// The event is created (its webhook is lost); then the rounds fail for a
	// day: the key expired, Stripe answers 401.
	fake.mu.Lock()
	fake.events = []reconcileEvent{lost}
	fake.failing = true
	fake.mu.Unlock()
	runOneRound(t, b, section, func() time.Time { return now.Add(-20 * time.Hour) })

	// The streamer is restarted (or another replica takes over); the
	// provider answers again.
	fake.setFailing(false)
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
	n := b.count(t, `SELECT count(*) FROM webhook_ingress.events WHERE provider = 'stripe' AND external_event_id = $1`, lost.id)
	if n != 1 {
		t.Fatalf("the Stripe event created 36h ago and never delivered was stored %d times (want 1): after the restart the round did not reach back "+
			"to the end of the last completed run; runs: %s", n, strings.Join(runs, " "))
	}
}

// failNext answers 401 to the next request once armed and passes the rest
// to next: a round that fails (an expired key, an outage) and the next that
// does not.
type failNext struct {
	mu    sync.Mutex
	armed bool
	next  http.Handler
}

func (f *failNext) arm() {
	f.mu.Lock()
	f.armed = true
	f.mu.Unlock()
}

func (f *failNext) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	fail := f.armed
	f.armed = false
	f.mu.Unlock()
	if fail {
		http.Error(w, `{"error":{"type":"api_error","message":"outage"}}`, http.StatusUnauthorized)
		return
	}
	f.next.ServeHTTP(w, r)
}

// A process whose FIRST round fails retries from the end of the last run
// completed before it started (by an earlier process, recorded in
// reconcile_runs), not from the default window. Before the fix the process
// had no entry for the source (the failed round set none), so its second
// round compared [now−25h, now−1h] only and the event created 36h ago was
// stored 0 times.
func TestScheduleFailedFirstRoundReachesBackToRecordedRun(t *testing.T) {
	t.Parallel()
	b := setupReconcile(t)
	now := time.Now()
	lost := reconcileEvent{id: "evt_lost_after_failed_first", typ: "invoice.paid", at: now.Add(-36 * time.Hour)}
	fake := &windowStripe{}
	gate := &failNext{next: fake}
	srv := httptest.NewServer(gate)
	defer srv.Close()
	section := backfill.Section{Enabled: true, Sources: []backfill.ReconcileSource{
		{Source: "stripe", Type: "stripe", APIKey: "sk_test_reconcile", BaseURL: srv.URL}}}.WithDefaults()
	if err := section.Validate(); err != nil {
		t.Fatal(err)
	}
	// An earlier process completed a round ending 48h ago.
	runOneRound(t, b, section, func() time.Time { return now.Add(-47 * time.Hour) })

	// The event is created; its webhook is lost. A new process starts; its
	// first round fails, its second (an interval later) does not.
	fake.mu.Lock()
	fake.events = []reconcileEvent{lost}
	fake.mu.Unlock()
	gate.arm()
	section.Interval = 50 * time.Millisecond // the arithmetic is that of 1h; the test is quicker
	before := b.count(t, `SELECT count(*) FROM webhook_ingress.reconcile_runs WHERE finished_at IS NOT NULL`)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		backfill.Schedule(ctx, backfill.ScheduleConfig{Section: section, Store: b.store, DB: b.pool, Leader: alwaysLeader{}, Metrics: b.metrics})
	}()
	testwait.Eventually(t, 60*time.Second, "the process's failed round and the one after it finished", func() (bool, string) {
		n := b.count(t, `SELECT count(*) FROM webhook_ingress.reconcile_runs WHERE finished_at IS NOT NULL`)
		return n >= before+2, fmt.Sprintf("%d finished runs", n)
	})
	cancel()
	<-done

	// The process's first two runs: a third may have begun before cancel
	// and been recorded as cancelled (an error too), which is not this
	// test's business.
	failed := b.count(t, `SELECT count(*) FILTER (WHERE error IS NOT NULL) FROM (
		SELECT error FROM webhook_ingress.reconcile_runs WHERE finished_at IS NOT NULL ORDER BY id OFFSET $1 LIMIT 2) r`, before)
	n := b.count(t, `SELECT count(*) FROM webhook_ingress.events WHERE provider = 'stripe' AND external_event_id = $1`, lost.id)
	if failed != 1 || n != 1 {
		t.Fatalf("after a failed first round (%d failed runs, want 1) the event created 36h ago was stored %d times (want 1): "+
			"the next round did not reach back to the run completed 48h ago", failed, n)
	}
}
