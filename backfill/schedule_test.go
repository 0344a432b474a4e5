package backfill_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/backfill"
	"github.com/inlet-dev/inlet/ingress"
	"github.com/inlet-dev/inlet/internal/testwait"
)

// alwaysLeader is a Leader for a single replica.
type alwaysLeader struct{}

func (alwaysLeader) Leading(context.Context) (bool, error) { return true, nil }

// gapGitHub is a GitHub webhook's deliveries API whose first list request
// is slow (a big page, a proxy, a rate-limit wait would do the same); while
// it is being answered GitHub sends (and fails to deliver) one webhook. The
// list shows each delivery once it has been sent.
type gapGitHub struct {
	mu     sync.Mutex
	lists  int
	sentAt time.Time // when "guid-gap" was sent; zero before
}

func (f *gapGitHub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	const path = "/repos/acme/widgets/hooks/42/deliveries"
	switch r.URL.Path {
	case path:
		f.mu.Lock()
		f.lists++
		first := f.lists == 1
		if first {
			f.sentAt = time.Now().Add(50 * time.Millisecond)
		}
		f.mu.Unlock()
		if first {
			time.Sleep(2 * time.Second) // a slow round: longer than the interval
		}
		f.mu.Lock()
		sentAt := f.sentAt
		f.mu.Unlock()
		if time.Now().Before(sentAt) {
			fmt.Fprint(w, `[]`)
			return
		}
		fmt.Fprintf(w, `[{"id":7001,"guid":"guid-gap","delivered_at":%q,"redelivery":false,"status":"Invalid HTTP Response: 503","status_code":503,"event":"push","action":null}]`,
			sentAt.UTC().Format(time.RFC3339Nano))
	case path + "/7001":
		fmt.Fprint(w, `{"id":7001,"guid":"guid-gap","event":"push","request":{"headers":{"X-GitHub-Delivery":"guid-gap","X-GitHub-Event":"push"},"payload":{"ref":"refs/heads/main"}},"response":{"headers":{},"payload":""}}`)
	default:
		http.NotFound(w, r)
	}
}

// Found by review helper-72: a scheduled round that lasts longer than
// reconcile.interval leaves a gap between two windows that no round ever
// compares. Each round's window is [now - window, now] with now read when the
// round starts (backfill/schedule.go, scheduledRound: until := cfg.Now();
// since := until.Add(-cfg.Section.Window)). Section.Validate accepts
// window == interval and documents that "at least Interval" is enough
// ("or events between two windows would never be compared"), which holds only
// if every round starts exactly one interval after the previous one. A round
// that is slow (rate-limit waits up to 15 min, many pages, a slow API) delays
// the next one: with window = interval = 300ms and a 2s first round, round 1
// covers [t0-0.3s, t0] and round 2 [t0+1.7s, t0+2s], so a GitHub delivery
// that failed at t0+0.05s is never listed in any window, never stored, never
// counted missing: exactly the lost webhook reconcile exists to catch.
//
// Expected: consecutive scheduled windows leave no gap: every delivery sent
// after the first round's start is compared by some round.
func TestScheduleLeavesNoGapAfterASlowRound(t *testing.T) {
	t.Parallel()
	b := setupReconcile(t)
	fake := &gapGitHub{}
	srv := httptest.NewServer(fake)
	defer srv.Close()
	// window == interval, which Validate accepts (at least Interval); the
	// durations are short so the test is quick, the arithmetic is the same
	// with interval: 1h, window: 1h and a round that waits out a rate limit.
	section := backfill.Section{Enabled: true, Interval: 300 * time.Millisecond, Window: 300 * time.Millisecond,
		Sources: []backfill.ReconcileSource{{Source: "github", Type: "github", Token: "ghp_backfill", BaseURL: srv.URL, Repo: "acme/widgets", HookID: 42}}}.WithDefaults()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		backfill.Schedule(ctx, backfill.ScheduleConfig{Section: section, Store: b.store, DB: b.pool, Leader: alwaysLeader{}, Metrics: b.metrics})
	}()
	testwait.Eventually(t, 30*time.Second, "four finished rounds", func() (bool, string) {
		n := b.count(t, `SELECT count(*) FROM webhook_ingress.reconcile_runs WHERE finished_at IS NOT NULL`)
		return n >= 4, fmt.Sprintf("%d finished runs", n)
	})
	cancel()
	<-done

	rows, err := b.admin.Query(context.Background(), `SELECT window_since, window_until FROM webhook_ingress.reconcile_runs ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	var windows []string
	var prevUntil time.Time
	var gaps []string
	for rows.Next() {
		var since, until time.Time
		if err := rows.Scan(&since, &until); err != nil {
			t.Fatal(err)
		}
		windows = append(windows, "["+since.Format("15:04:05.000")+", "+until.Format("15:04:05.000")+"]")
		if !prevUntil.IsZero() && since.After(prevUntil) {
			gaps = append(gaps, "("+prevUntil.Format("15:04:05.000")+", "+since.Format("15:04:05.000")+")")
		}
		prevUntil = until
	}
	rows.Close()
	fake.mu.Lock()
	sentAt := fake.sentAt
	fake.mu.Unlock()
	n := b.count(t, `SELECT count(*) FROM webhook_ingress.events WHERE provider = 'github' AND external_event_id = 'guid-gap'`)
	if n != 1 || len(gaps) > 0 {
		t.Fatalf("the failed delivery sent at %s was stored %d times (want 1); windows %s; gaps no round compared: %s",
			sentAt.Format("15:04:05.000"), n, strings.Join(windows, " "), strings.Join(gaps, " "))
	}
}

// Found by review helper-72: the scheduled reconcile races the live webhook
// and replaces the provider's signed bytes by the API's unsigned copy. Every
// scheduled window ends at the moment the round starts
// (backfill/schedule.go, scheduledRound: until := cfg.Now()), and there is no
// setting to leave the last minutes out (Section has interval, window,
// db_role, sources). An event the provider created a couple of seconds
// before the round, whose webhook is simply still on its way, is "missing":
// the round stores the API's copy (signature_verified = false), increments
// inlet_reconcile_missing_total (which operations.md says to alert on) and
// logs "reconcile stored events the provider listed but never delivered";
// when the signed webhook arrives a moment later it is a duplicate and its
// bytes are dropped. DESIGN.md: "The bytes a provider signed are stored
// byte-for-byte". operations.md tells CLI users to "Leave the last hours
// out (--until 6h) where the signed bytes matter", but the schedule, the
// always-on form, cannot.
//
// Expected: the scheduled round does not count or store an event whose
// webhook may still be in flight (seconds old); the signed delivery that
// arrives right after the round is the one the log keeps.
func TestScheduleLeavesInFlightWebhooksAlone(t *testing.T) {
	t.Parallel()
	b := setupReconcile(t)
	ev := reconcileEvent{id: "evt_inflight", typ: "invoice.paid", at: time.Now().Add(-2 * time.Second)}
	older := reconcileEvent{id: "evt_old", typ: "invoice.paid", at: time.Now().Add(-2 * time.Hour), delivered: true}
	events := []reconcileEvent{ev, older}
	b.deliver(t, "stripe", "stripe", events, stripeEventJSON)
	srv := httptest.NewServer(&listStripe{events: events, pageSize: 10})
	defer srv.Close()
	section := backfill.Section{Enabled: true, Sources: []backfill.ReconcileSource{
		{Source: "stripe", Type: "stripe", APIKey: "sk_test_reconcile", BaseURL: srv.URL}}}.WithDefaults()
	if err := section.Validate(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		backfill.Schedule(ctx, backfill.ScheduleConfig{Section: section, Store: b.store, DB: b.pool, Leader: alwaysLeader{}, Metrics: b.metrics})
	}()
	testwait.Eventually(t, 30*time.Second, "the first scheduled round finished", func() (bool, string) {
		n := b.count(t, `SELECT count(*) FROM webhook_ingress.reconcile_runs WHERE finished_at IS NOT NULL`)
		return n >= 1, fmt.Sprintf("%d finished runs", n)
	})
	cancel()
	<-done

	// The signed webhook of evt_inflight arrives now, as ingress stores it.
	signed := []byte(`{"id":"evt_inflight","object":"event","type":"invoice.paid","signed":"by stripe"}`)
	stored, err := b.store.Insert(context.Background(), &ingress.Event{Provider: "stripe", Scheme: "stripe", ExternalID: ev.id,
		EventType: ev.typ, Headers: map[string][]string{"Stripe-Signature": {"t=1,v1=00"}}, RawBody: signed, Verified: true})
	if err != nil {
		t.Fatal(err)
	}
	var body []byte
	var verified bool
	var headers string
	if err := b.admin.QueryRow(context.Background(), `SELECT raw_body, signature_verified, headers::text FROM webhook_ingress.events
		WHERE provider = 'stripe' AND external_event_id = $1`, ev.id).Scan(&body, &verified, &headers); err != nil {
		t.Fatal(err)
	}
	missing := b.count(t, `SELECT coalesce(sum(missing), 0)::int FROM webhook_ingress.reconcile_runs`)
	if !stored || !verified || string(body) != string(signed) || missing != 0 {
		t.Fatalf("an event created 2s before the scheduled round was counted missing (%d, metric %v) and stored from the API "+
			"(headers %s, verified %v); its signed webhook, arriving just after, was a duplicate (stored %v) and its signed bytes were dropped",
			missing, b.missingMetric(t, "stripe"), headers, verified, stored)
	}
}
