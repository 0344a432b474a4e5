package monitor_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/inlet-dev/inlet/monitor"
)

// An unrouted type appears in inlet_events_unrouted_total and is logged and
// POSTed to the alert sink once, as a new type; a routed new type is
// reported too. An alert the sink refuses is sent again on the next check,
// and only once it went out is it not repeated. Random types past the cap
// become one _other series and one alert.
func TestEventTypesUnroutedMetricAndAlert(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	super, streamer := pools(t)
	exec(t, super, `INSERT INTO webhook_ingress.subscriptions (handler, provider_pattern, event_type_pattern) VALUES ('billing', 'stripe', 'charge.*')`)
	insert := func(source, id, typ string) {
		t.Helper()
		exec(t, super, `INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, event_type, raw_body, signature_verified)
			VALUES ($1, 'hmac', $2, $3, '{}', true)`, source, id, typ)
	}
	insert("stripe", "evt_1", "charge.succeeded")
	insert("stripe", "evt_2", "customer.created")
	insert("stripe", "evt_3", "customer.created")

	var mu sync.Mutex
	var alerts []map[string]any
	var refuse atomic.Bool
	refuse.Store(true)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var a map[string]any
		if err := json.NewDecoder(r.Body).Decode(&a); err != nil {
			t.Errorf("alert body: %v", err)
		}
		if refuse.Load() {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		mu.Lock()
		alerts = append(alerts, a)
		mu.Unlock()
	}))
	defer hook.Close()
	var logs strings.Builder
	var logMu sync.Mutex
	reg := prometheus.NewRegistry()
	w, err := monitor.NewEventTypes(monitor.EventTypesConfig{
		DB: streamer, MaxTypesPerSource: 3, AlertURL: hook.URL, Metrics: reg,
		Logger: newLogger(&logs, &logMu),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Check(ctx); err != nil {
		t.Fatal(err)
	}
	// The sink refused: nothing recorded, so the next check sends again.
	refuse.Store(false)
	if err := w.Check(ctx); err != nil {
		t.Fatal(err)
	}
	if err := w.Check(ctx); err != nil { // nothing new: no alert
		t.Fatal(err)
	}
	want := `
# HELP inlet_events_unrouted_total Events that created no job (no enabled subscription matched, or its filter rejected them), by source and event type; a source's types past silence.max_types_per_source count as type _other. From event_types: every replica reports the same total.
# TYPE inlet_events_unrouted_total counter
inlet_events_unrouted_total{source="stripe",type="charge.succeeded"} 0
inlet_events_unrouted_total{source="stripe",type="customer.created"} 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "inlet_events_unrouted_total"); err != nil {
		t.Error(err)
	}
	mu.Lock()
	got := map[string]map[string]any{}
	for _, a := range alerts {
		got[fmt.Sprint(a["source"], "/", a["event_type"])] = a
	}
	if len(alerts) != 2 || got["stripe/customer.created"]["routed"] != "no" || got["stripe/charge.succeeded"]["routed"] != "yes" ||
		got["stripe/customer.created"]["status"] != "new_event_type" {
		t.Errorf("alerts: %v, want one per new type (customer.created unrouted, charge.succeeded routed)", alerts)
	}
	alerts = nil
	mu.Unlock()
	logMu.Lock()
	if n := strings.Count(logs.String(), `msg="new event type"`); n != 2 {
		t.Errorf("%d new-type log lines, want 2 (each once, though the first alert was refused):\n%s", n, logs.String())
	}
	logMu.Unlock()

	// A replayed request with random (unsigned) types: three named at most,
	// the rest one _other series and one alert.
	for i := range 20 {
		insert("github", fmt.Sprintf("d%d", i), fmt.Sprintf("random.%d", i))
	}
	if err := w.Check(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := testutil.GatherAndCount(reg, "inlet_events_unrouted_total"); err != nil || n != 2+3+1 {
		t.Errorf("%d unrouted series, %v; want 6 (2 stripe, 3 github, _other)", n, err)
	}
	mu.Lock()
	if len(alerts) != 4 {
		t.Errorf("%d alerts after 20 random types, want 4 (3 named, _other): %v", len(alerts), alerts)
	}
	mu.Unlock()
}
