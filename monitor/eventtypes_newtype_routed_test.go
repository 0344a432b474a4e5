package monitor_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/inlet-dev/inlet/monitor"
)

// TestNewTypeReportedRoutedThenSilentlyUnrouted (review helper-153, fixed;
// this describes the code before the fix): the "new event type" report of
// a type took its routed state from the type's latest event
// (event_types.routed, r.Routed), but MonitorEventTypeAlerted recorded
// alerted_routed from the subscription state (type_subscribed,
// r.Subscribed). When the two differed at the first report, what the
// operator was told and what was recorded disagreed, and 049's change
// detection (type_subscribed IS DISTINCT FROM alerted_routed) compared
// against a state that was never reported: the change alert that should
// correct the first report never came.
//
// Scenario: subscription S routes stripe/charge.refunded; the first event
// of that type arrives and gets its job; before the streamer's next check
// (silence.types_every, 10 s by default) S is disabled (a consumer
// deregisters, an operator turns it off). The check alerted "new event
// type, routed: yes, a subscription routes it" and recorded
// alerted_routed = false. From then on every charge.refunded created no
// job, and no "event_type_unrouted" alert was ever sent: the type was
// dropped with the only alert saying it is routed.
//
// Root cause: monitor/eventtypes.go report(): for r.New the routed/reason
// fields came from r.Routed, but MonitorEventTypeAlerted was called with
// Routed: &r.Subscribed.
//
// Now: the new-type report judges routing by r.Subscribed, as 049's change
// reports do and as alerted_routed records it: the first alert says routed
// "no" (no enabled subscription matches it), so the operator is alerted
// that the type is not routed.
func TestNewTypeReportedRoutedThenSilentlyUnrouted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rw := newRefundsWatch(t)
	super, w, hook, insert := rw.super, rw.w, rw.hook, rw.insert
	insert("evt_1") // routed: the trigger creates its job
	var jobs int
	if err := super.QueryRow(ctx, `SELECT count(*) FROM webhook_ingress.jobs WHERE handler = 'refunds'`).Scan(&jobs); err != nil {
		t.Fatal(err)
	}
	if jobs != 1 {
		t.Fatalf("setup: %d jobs for the first event, want 1", jobs)
	}
	// Between the event and the streamer's next check, the subscription
	// goes away.
	exec(t, super, `UPDATE webhook_ingress.subscriptions SET enabled = false WHERE handler = 'refunds'`)
	if err := w.Check(ctx); err != nil {
		t.Fatal(err)
	}
	first := hook.take()
	// Every later event of the type is unrouted.
	for i := range 3 {
		insert(fmt.Sprintf("evt_late_%d", i))
		if err := w.Check(ctx); err != nil {
			t.Fatal(err)
		}
	}
	later := hook.take()
	var unrouted int64
	for _, r := range w.Last() {
		if r.Source == "stripe" && r.Type == "charge.refunded" {
			unrouted = r.UnroutedEvents
		}
	}
	if unrouted != 3 {
		t.Fatalf("setup: %d unrouted charge.refunded events, want 3", unrouted)
	}
	toldUnrouted := false
	for _, a := range append(first, later...) {
		if a["event_type"] != "charge.refunded" {
			continue
		}
		if a["routed"] == "no" || a["status"] == "event_type_unrouted" {
			toldUnrouted = true
		}
	}
	if !toldUnrouted {
		t.Fatalf("charge.refunded is unrouted (3 events, no job) but no alert said so; alerts: first check %v, later checks %v",
			first, later)
	}
}

// TestNewFilteredTypeAlertedAsMatchedByNoSubscription (review helper-153,
// fixed; this describes the code before the fix): same root cause, the
// other direction. A type that a subscription with a content filter matches
// (type_subscribed true, its later events delivered) was alerted as new
// with routed "no" and the reason "no subscription matches it: its events
// create no job" when its first event happened to fail the filter;
// alerted_routed was recorded true, so when its events did pass the filter
// nothing ever corrected the alert ("routed again" was never logged). The
// operator was told a type is dropped that is routed.
//
// Root cause: as above (monitor/eventtypes.go report(): routed and reason
// of a new row from r.Routed, alerted_routed from r.Subscribed).
//
// Now: the alert does not claim no subscription matches a type that an
// enabled subscription's patterns match (049 judges routing by
// type_subscribed for exactly this reason): it says routed "yes", that a
// filtered subscription's events create jobs when they pass it, and how
// many of its events so far created none.
func TestNewFilteredTypeAlertedAsMatchedByNoSubscription(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	super, streamer := pools(t)
	exec(t, super, `INSERT INTO webhook_ingress.subscriptions (handler, provider_pattern, event_type_pattern, max_attempts, filter)
		VALUES ('billing', 'stripe', 'charge.captured', 5, 'payload.amount > 100')`)
	// As ingress stores it: the filtered subscription's job only when the
	// filter passed.
	insert := func(id string, amount int) {
		t.Helper()
		exec(t, super, `INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, event_type, raw_body, signature_verified)
			VALUES ('stripe', 'stripe', $1, 'charge.captured', $2::bytea, true)`, id, fmt.Sprintf(`{"amount":%d}`, amount))
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
	insert("evt_small", 5) // fails the filter: no job
	if err := w.Check(ctx); err != nil {
		t.Fatal(err)
	}
	for i := range 3 { // the type's events are delivered from now on
		insert(fmt.Sprintf("evt_big_%d", i), 500)
		if err := w.Check(ctx); err != nil {
			t.Fatal(err)
		}
	}
	alerts := hook.take()
	logMu.Lock()
	text := logs.String()
	logMu.Unlock()
	var claimed bool
	for _, a := range alerts {
		if a["event_type"] == "charge.captured" && strings.Contains(fmt.Sprint(a["reason"]), "no subscription matches it") {
			claimed = true
		}
	}
	corrected := strings.Contains(text, "event type routed again")
	if claimed && !corrected {
		t.Fatalf("an enabled subscription matches charge.captured and routes its events, but the alert said %v and nothing corrected it; log:\n%s",
			alerts, text)
	}
	if len(alerts) != 1 || alerts[0]["routed"] != "yes" {
		t.Errorf("alerts: %v, want one, new_event_type with routed yes (an enabled subscription matches charge.captured)", alerts)
	}
}

// refundsWatch is the set-up the routing-report tests share: subscription
// 'refunds' of stripe/charge.refunded, an EventTypes check of the database
// whose alerts go to hook and whose log is kept, and insert, which stores
// a charge.refunded event (its job made by the trigger while the
// subscription is enabled).
type refundsWatch struct {
	super  *pgxpool.Pool
	w      *monitor.EventTypes
	hook   *alertHook
	logMu  sync.Mutex
	logs   strings.Builder
	insert func(id string)
}

func newRefundsWatch(t *testing.T) *refundsWatch {
	t.Helper()
	super, streamer := pools(t)
	exec(t, super, `INSERT INTO webhook_ingress.subscriptions (handler, provider_pattern, event_type_pattern, max_attempts)
		VALUES ('refunds', 'stripe', 'charge.refunded', 5)`)
	rw := &refundsWatch{super: super, hook: newAlertHook(t)}
	rw.insert = func(id string) {
		t.Helper()
		exec(t, super, `INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, event_type, raw_body, signature_verified)
			VALUES ('stripe', 'stripe', $1, 'charge.refunded', '{}', true)`, id)
	}
	w, err := monitor.NewEventTypes(monitor.EventTypesConfig{
		DB: streamer, AlertURL: rw.hook.URL, Metrics: prometheus.NewRegistry(), Logger: newLogger(&rw.logs, &rw.logMu),
	})
	if err != nil {
		t.Fatal(err)
	}
	rw.w = w
	return rw
}

// log returns what was logged so far.
func (rw *refundsWatch) log() string {
	rw.logMu.Lock()
	defer rw.logMu.Unlock()
	return rw.logs.String()
}
