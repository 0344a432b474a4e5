package monitor_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/inlet-dev/inlet/monitor"
)

// Review helper-83.
//
// DEFECT: while the alert sink (silence.alert_url) hangs or is unreachable,
// one Check posts every pending new type in turn, each waiting out the
// HTTP client's timeout (10 s by default), and does so again on every
// check (alerted_at stays NULL). The fold, the event_types read behind
// inlet_events_unrouted_total and the detection of further new types all
// wait behind it: with 100 pending types (one source's cap, e.g. after a
// replayed GitHub delivery with random types) each check takes ~17 minutes
// instead of silence.types_every (10 s), so the metric, the only other
// signal, goes stale exactly when alerts cannot be delivered.
//
// EXPECTED: the watcher keeps folding and refreshing the metric every
// types_every whatever the sink does; a failed post is retried on the next
// check without holding the others up.
//
// ROOT CAUSE: monitor/eventtypes.go Check: `for _, r := range fresh {
// w.report(ctx, r) }` — sequential postAlert calls (monitor/silence.go
// postAlert, one client.Do each) with no per-check budget and no stop after
// the first failure.
//
// SUGGESTED FIX: stop posting in a check at the first failed alert (the
// sink is down: the rest are retried next check, as alerted_at is still
// NULL), and/or bound the whole report phase by a deadline of about
// types_every; or send alerts from a goroutine of their own so the fold loop
// never waits on the sink.
func TestHangingAlertSinkDoesNotStallTheFold(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	super, streamer := pools(t)
	for i := range 20 {
		exec(t, super, `INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, event_type, raw_body, signature_verified)
			VALUES ('github', 'github', $1, $2, '{}', true)`, fmt.Sprintf("d%d", i), fmt.Sprintf("t.%d", i))
	}
	release := make(chan struct{})
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select { // a sink that accepts the connection and never answers
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer hook.Close()
	defer close(release)
	var logs strings.Builder
	var logMu sync.Mutex
	w, err := monitor.NewEventTypes(monitor.EventTypesConfig{
		DB: streamer, AlertURL: hook.URL, HTTPClient: &http.Client{Timeout: 500 * time.Millisecond},
		Metrics: prometheus.NewRegistry(), Logger: newLogger(&logs, &logMu),
	})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); w.Run(ctx, 100*time.Millisecond) }()
	defer func() { cancel(); <-done }()

	has := func(typ string) bool {
		for _, r := range w.Last() {
			if r.Type == typ {
				return true
			}
		}
		return false
	}
	deadline := time.Now().Add(10 * time.Second)
	for !has("t.19") {
		if time.Now().After(deadline) {
			t.Fatal("first fold never happened")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// A new type arrives. The watcher runs every 100 ms: it should be folded
	// and exported within a few checks, whatever the alert sink does.
	exec(t, super, `INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, event_type, raw_body, signature_verified)
		VALUES ('github', 'github', 'late', 'late.type', '{}', true)`)
	start := time.Now()
	for !has("late.type") {
		if time.Since(start) > 3*time.Second {
			t.Fatal("a new type was not folded or exported within 3 s with checks every 100 ms: the check is stuck " +
				"posting 20 pending alerts to a hanging sink one after the other (20 × 500 ms client timeout)")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
