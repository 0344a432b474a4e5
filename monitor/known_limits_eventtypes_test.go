//go:build knownlimits

package monitor_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/inlet-dev/inlet/monitor"
)

// Review helper-83.
//
// DEFECT: a (source, type) that was routed when it first arrived and later
// stops being routed (its only subscription disabled by an operator, or
// switched off by a consumer's re-registration with narrower patterns, 046)
// is never alerted on as unrouted. The one alert per (source, type) went out
// when the type was new and said "routed: yes, a subscription routes it";
// event_types.alerted_at is set for good, so from then on its events create
// no job and reach no handler with no log line and no POST to
// silence.alert_url. Only the counter moves.
//
// EXPECTED (DESIGN.md, fan-out: "An event that matches no subscription is
// never silent: its (source, type) is counted, listed and alerted on"; the
// alert's own reason text: "no subscription matches it: its events create
// no job"): when a type's routing goes from routed to unrouted, the streamer
// logs a warning and POSTs an alert once for that transition (status e.g.
// "new_event_type"/"unrouted_event_type", routed "no").
//
// ROOT CAUSE: monitor/eventtypes.go Check/report only report rows with
// is_new (alerted_at IS NULL, schema/queries/eventtypes.sql
// MonitorEventTypes); 013_event_types.up.sql's fold never clears alerted_at
// or records that the routed state changed.
//
// SUGGESTED FIX: keep the routed state last reported (e.g. an
// alerted_routed boolean beside alerted_at, set by MonitorEventTypeAlerted),
// select rows whose routed differs from it as "to report", and report a
// routed→unrouted change with the same at-least-once, leader-only path as a
// new type (optionally unrouted→routed at info level).
func TestKnownLimitTypeThatStopsBeingRoutedIsNotAlerted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	super, streamer := pools(t)
	exec(t, super, `INSERT INTO webhook_ingress.subscriptions (handler, provider_pattern, event_type_pattern) VALUES ('billing', 'stripe', 'charge.*')`)
	insert := func(id, typ string) {
		t.Helper()
		exec(t, super, `INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, event_type, raw_body, signature_verified)
			VALUES ('stripe', 'hmac', $1, $2, '{}', true)`, id, typ)
	}
	var mu sync.Mutex
	var alerts []map[string]any
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var a map[string]any
		_ = json.NewDecoder(r.Body).Decode(&a)
		mu.Lock()
		alerts = append(alerts, a)
		mu.Unlock()
	}))
	defer hook.Close()
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
	mu.Lock()
	if len(alerts) != 1 || alerts[0]["routed"] != "yes" {
		t.Fatalf("first alert: %v, want one with routed yes", alerts)
	}
	alerts = nil
	mu.Unlock()
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
	mu.Lock()
	n := len(alerts)
	mu.Unlock()
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

// Review helper-83.
//
// DEFECT: the overflow row of a source is named '_other', a string any
// sender can put in its type field. GitHub's and Shopify's type headers are
// not signed, so one request with `X-GitHub-Event: _other` (a captured
// signed delivery, re-sent with that header and a fresh delivery id) makes
// the fold treat it as the overflow row (013_event_types.up.sql,
// fold_event_types: `(t.provider IS NOT NULL OR a.event_type = '_other') AS
// known`): the row is created and alerted at once, with the reason "source
// github sent more than N distinct event types" although it sent one. When
// the source really passes silence.max_types_per_source later, the overflow
// lands in that already-alerted row: no log line, no alert. That alert is
// the only notice that later new types are being hidden in _other (the
// documented known limit tells operators to watch _other).
//
// EXPECTED: the overflow bucket cannot be reached by a type a sender
// chooses; passing the cap raises its alert once, whatever types came
// before; a real type "_other" is an ordinary type (its own row, counted
// against the cap, alerted as a new type).
//
// ROOT CAUSE: 013_event_types.up.sql fold_event_types (the `known` and
// `dest` expressions, and the seed) and monitor/eventtypes.go OtherType use
// an in-band value that ingress accepts as an event type.
//
// SUGGESTED FIX: mark the overflow row out of band (e.g. an `overflow
// boolean` column in the key, or a type value ingress can never store: over
// MaxEventTypeBytes, or containing a NUL-free but reserved prefix ingress
// rejects), and keep '_other' only as the metric label / display name.
func TestKnownLimitSenderTypeOtherPreemptsTheOverflowAlert(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	super, streamer := pools(t)
	insert := func(id, typ string) {
		t.Helper()
		exec(t, super, `INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, event_type, raw_body, signature_verified)
			VALUES ('github', 'github', $1, $2, '{}', true)`, id, typ)
	}
	var mu sync.Mutex
	var alerts []map[string]any
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var a map[string]any
		_ = json.NewDecoder(r.Body).Decode(&a)
		mu.Lock()
		alerts = append(alerts, a)
		mu.Unlock()
	}))
	defer hook.Close()
	var logs strings.Builder
	var logMu sync.Mutex
	w, err := monitor.NewEventTypes(monitor.EventTypesConfig{
		DB: streamer, MaxTypesPerSource: 3, AlertURL: hook.URL, Metrics: prometheus.NewRegistry(), Logger: newLogger(&logs, &logMu),
	})
	if err != nil {
		t.Fatal(err)
	}
	// One request whose unsigned type header says "_other".
	insert("forged", "_other")
	if err := w.Check(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	alerts = nil
	mu.Unlock()
	// Later, github really sends more types than the cap (3): push, issues,
	// pull_request get the named slots, release and deployment overflow.
	for i, typ := range []string{"push", "issues", "pull_request", "release", "deployment"} {
		insert(fmt.Sprintf("d%d", i), typ)
	}
	if err := w.Check(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	overflow := false
	for _, a := range alerts {
		overflow = overflow || strings.Contains(fmt.Sprint(a["reason"]), "more than 3 distinct event types")
	}
	if !overflow {
		t.Errorf("github passed the cap of 3 types (release and deployment hidden in _other) and no overflow alert went out; "+
			"alerts: %v", alerts)
	}
}
