package monitor_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/inlet-dev/inlet/monitor"
)

// Found by review helper-83 (fixed by 049): a type that a subscription routed
// when first seen and no longer does was not alerted; only the counter moved.
func TestTypeThatStopsBeingRoutedIsAlerted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	super, streamer := pools(t)
	exec(t, super, `INSERT INTO webhook_ingress.subscriptions (handler, provider_pattern, event_type_pattern) VALUES ('billing', 'stripe', 'charge.*')`)
	insert := func(id, typ string) {
		t.Helper()
		exec(t, super, `INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, event_type, raw_body, signature_verified)
			VALUES ('stripe', 'hmac', $1, $2, '{}', true)`, id, typ)
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

	// charge.succeeded arrives routed: one "new type, routed yes" alert.
	insert("evt_1", "charge.succeeded")
	if err := w.Check(ctx); err != nil {
		t.Fatal(err)
	}
	if alerts := hook.take(); len(alerts) != 1 || alerts[0]["routed"] != "yes" {
		t.Fatalf("first alert: %v, want one with routed yes", alerts)
	}
	logMu.Lock()
	logs.Reset()
	logMu.Unlock()

	// The billing handler's subscription is switched off (inlet subscriptions
	// disable billing, or a consumer re-registering without charge.*): from
	// now on every charge.succeeded creates no job and reaches no handler.
	exec(t, super, `UPDATE webhook_ingress.subscriptions SET enabled = false WHERE handler = 'billing'`)
	insert("evt_2", "charge.succeeded")
	insert("evt_3", "charge.succeeded")
	if err := w.Check(ctx); err != nil {
		t.Fatal(err)
	}
	var row *monitor.EventTypeRow
	for _, r := range w.Last() {
		if r.Type == "charge.succeeded" {
			row = &r
		}
	}
	if row == nil || row.Routed == nil || *row.Routed || row.UnroutedEvents != 2 {
		t.Fatalf("precondition: charge.succeeded row %+v, want routed=false with 2 unrouted events", row)
	}
	n := len(hook.take())
	logMu.Lock()
	logged := strings.Contains(logs.String(), "charge.succeeded")
	logMu.Unlock()
	if n == 0 {
		t.Errorf("charge.succeeded became unrouted (2 events reached no handler) and no alert went to silence.alert_url")
	}
	if !logged {
		t.Errorf("charge.succeeded became unrouted and nothing was logged")
	}
}
