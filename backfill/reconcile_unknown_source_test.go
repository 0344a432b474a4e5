package backfill_test

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/backfill"
	"github.com/inlet-dev/inlet/inletyaml"
	"github.com/inlet-dev/inlet/internal/config"
	"github.com/inlet-dev/inlet/internal/testwait"
)

// TestScheduledReconcileOfAnUnknownSourceDuplicatesEveryEvent (review helper-141, fixed; this describes the code before the fix):
// a reconcile: section whose source is not a name of sources: (here
// the typo "strpe" for the configured source "stripe") passes `inlet config
// check` and every service (inletyaml/inletyaml.go:126-140 checks only a
// reconcile source that matches a configured one and skips one that matches
// none). inlet streamer's schedule then compares the provider's list with
// the events stored under "strpe" (none: the webhooks are under "stripe"),
// counts every listed event missing and stores each one again under a
// source that does not exist; a handler subscribed to provider "*" gets
// every event a second time (a new job with a new job id, so its
// idempotency key does not help). `inlet reconcile stripe --source strpe`
// refuses the same name (cmd/inlet/backfill.go:143 backfillSource).
//
// Now: the file is refused (a problem naming
// reconcile.sources[0].source), so the schedule never runs with it; failing
// that, no event the log already holds is stored a second time.
func TestScheduledReconcileOfAnUnknownSourceDuplicatesEveryEvent(t *testing.T) {
	t.Parallel()
	b := setupReconcile(t)
	b.subscribe(t, "billing", "*")
	now := time.Now().UTC()
	events := []reconcileEvent{
		{id: "evt_dup1", typ: "invoice.paid", at: now.Add(-5 * time.Hour), delivered: true},
		{id: "evt_dup2", typ: "invoice.paid", at: now.Add(-4 * time.Hour), delivered: true},
		{id: "evt_dup3", typ: "charge.refunded", at: now.Add(-3 * time.Hour), delivered: true},
	}
	// Every event arrived as a signed webhook, stored by ingress under the
	// configured source's name.
	b.deliver(t, "stripe", "stripe", events, stripeEventJSON)
	srv := httptest.NewServer(&listStripe{events: events, pageSize: 10})
	defer srv.Close()

	doc := fmt.Sprintf(`sources:
  - name: stripe
    type: stripe
    secrets: [whsec_review]
reconcile:
  enabled: true
  sources:
    - source: strpe
      type: stripe
      api_key: sk_test_reconcile
      base_url: %s
`, srv.URL)
	cfg, err := inletyaml.ParseFor([]byte(doc), func(string) (string, bool) { return "", false }, config.StreamerService)
	if _, ok := errors.AsType[*config.Problems](err); ok {
		return // refused, as it should be (the fix)
	}
	if err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		backfill.Schedule(ctx, backfill.ScheduleConfig{Section: cfg.Reconcile, Store: b.store, DB: b.pool, Leader: alwaysLeader{}, Metrics: b.metrics})
	}()
	testwait.Eventually(t, 30*time.Second, "the first scheduled round finished", func() (bool, string) {
		n := b.count(t, `SELECT count(*) FROM webhook_ingress.reconcile_runs WHERE finished_at IS NOT NULL`)
		return n >= 1, fmt.Sprintf("%d finished runs", n)
	})
	cancel()
	<-done

	stored := b.count(t, `SELECT count(*) FROM webhook_ingress.events WHERE external_event_id LIKE 'evt_dup%'`)
	jobs := b.count(t, `SELECT count(*) FROM webhook_ingress.jobs j JOIN webhook_ingress.events e ON e.id = j.event_id
		WHERE j.handler = 'billing' AND e.external_event_id LIKE 'evt_dup%'`)
	var providers string
	if err := b.admin.QueryRow(context.Background(), `SELECT string_agg(DISTINCT provider, ',' ORDER BY provider)
		FROM webhook_ingress.events WHERE external_event_id LIKE 'evt_dup%'`).Scan(&providers); err != nil {
		t.Fatal(err)
	}
	if stored != len(events) || jobs != len(events) {
		t.Fatalf("inlet config check accepted reconcile.sources[0].source %q (no such source; the CLI refuses it), and one scheduled round "+
			"stored the %d events already delivered to %q again: %d event rows (providers %s), %d jobs for handler billing (want %d and %d)",
			"strpe", len(events), "stripe", stored, providers, jobs, len(events), len(events))
	}
}
