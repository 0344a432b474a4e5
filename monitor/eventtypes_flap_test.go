package monitor_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/inlet-dev/inlet/monitor"
)

// Review helper-89 (defect in e459cca / schema 049).
//
// Defect: event_types.routed is "was the LATEST event of the type routed"
// (013: last_routed_at >= last_unrouted_at), and 049 alerts every time it
// moves away from alerted_routed. A subscription with a content filter
// (014, a documented feature) routes some events of a type and rejects
// others by design, so routed flips with whichever event came last: each
// Check after a rejected event POSTs an "event type no longer routed"
// alert (status event_type_unrouted) and each Check after a passing one
// logs "routed again", round after round, while nothing about the routing
// changed. An alert storm the operator can only silence by dropping the
// alert URL.
//
// Expected: a type whose subscription still routes it (its events keep
// creating jobs) is not alerted again and again; at most one report per
// real change of routing.
func TestFilteredTypeDoesNotFlapUnroutedAlerts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	super, streamer := pools(t)
	// One subscription, never changed: big charges go to billing.
	exec(t, super, `INSERT INTO webhook_ingress.subscriptions (handler, provider_pattern, event_type_pattern, max_attempts, filter)
		VALUES ('billing', 'stripe', 'charge.succeeded', 5, 'payload.amount > 100')`)
	// insert stores an event as ingress does: the filtered subscription's job
	// is created (fan_out_filtered, here written directly) only when the
	// filter passed.
	insert := func(id string, amount int) {
		t.Helper()
		exec(t, super, `INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, event_type, raw_body, signature_verified)
			VALUES ('stripe', 'hmac', $1, 'charge.succeeded', $2::bytea, true)`, id, fmt.Sprintf(`{"amount":%d}`, amount))
		if amount > 100 {
			exec(t, super, `INSERT INTO webhook_ingress.jobs (event_id, event_received_at, handler, provider, event_type, max_attempts)
				SELECT id, received_at, 'billing', provider, event_type, 5 FROM webhook_ingress.events
				WHERE provider = 'stripe' AND external_event_id = $1`, id)
		}
	}
	hook := newAlertHook(t)
	var logs strings.Builder
	var logMu sync.Mutex
	w, err := monitor.NewEventTypes(monitor.EventTypesConfig{
		DB: streamer, AlertURL: hook.URL, Metrics: prometheus.NewRegistry(), Logger: newLogger(&logs, &logMu),
	})
	if err != nil {
		t.Fatal(err)
	}
	insert("evt_0", 500)
	if err := w.Check(ctx); err != nil {
		t.Fatal(err)
	}
	// Small and big charges alternate between checks, as they do in
	// production; the subscription stays as it is.
	for i := range 4 {
		insert(fmt.Sprintf("evt_small_%d", i), 5)
		if err := w.Check(ctx); err != nil {
			t.Fatal(err)
		}
		insert(fmt.Sprintf("evt_big_%d", i), 500)
		if err := w.Check(ctx); err != nil {
			t.Fatal(err)
		}
	}
	var jobs int
	if err := super.QueryRow(ctx, `SELECT count(*) FROM webhook_ingress.jobs WHERE handler = 'billing'`).Scan(&jobs); err != nil {
		t.Fatal(err)
	}
	if jobs != 5 {
		t.Fatalf("precondition: billing has %d jobs, want 5 (the big charges)", jobs)
	}
	n := 0
	for _, a := range hook.take() {
		if a["status"] == "event_type_unrouted" {
			n++
		}
	}
	logMu.Lock()
	again := strings.Count(logs.String(), "event type routed again")
	logMu.Unlock()
	if n > 1 {
		t.Errorf("%d event_type_unrouted alerts (and %d \"routed again\" log lines) for charge.succeeded, whose only subscription never changed and still routes it (every big charge got a job): an alert storm, want at most one", n, again)
	}
}
