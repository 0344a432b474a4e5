package monitor_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/inlet-dev/inlet/monitor"
)

// idSink is an alert sink that keeps each POST's status and alert_id, and
// answers 503 to the POSTs whose index (from 0) is in fail: a sink that
// could not take them, so the change is sent again at the next check.
type idSink struct {
	URL string

	mu       sync.Mutex
	fail     map[int]bool
	statuses []string
	ids      []string
}

func newIDSink(t *testing.T, fail ...int) *idSink {
	t.Helper()
	s := &idSink{fail: map[int]bool{}}
	for _, i := range fail {
		s.fail[i] = true
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var a struct {
			AlertID string `json:"alert_id"`
			Status  string `json:"status"`
		}
		_ = json.NewDecoder(r.Body).Decode(&a)
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.fail[len(s.ids)] {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		s.statuses, s.ids = append(s.statuses, a.Status), append(s.ids, a.AlertID)
	}))
	t.Cleanup(srv.Close)
	s.URL = srv.URL
	return s
}

func (s *idSink) posts() (statuses, ids []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.statuses), slices.Clone(s.ids)
}

// TestUnroutedAlertIDMovesOnEachReport (review helper-334, fixed).
// Defect: monitor/eventtypes.go typeAlertID named an event_type_unrouted
// alert by source, type, status and the row's last_routed_at, which only
// the fold moves (when a routed event arrives). A type goes unrouted
// (alert id X); its subscription is enabled again (logged, recorded:
// MonitorEventTypeAlerted sets alerted_routed = true); disabled again
// before any event of that type arrives: the second unrouted alert got
// alert_id X again, and a sink that drops an alert_id it has taken (as
// docs/operations.md invites: "different for every change") dropped the
// second unrouting.
// Setup: real PostgreSQL, a real HTTP sink; billing subscribes to stripe
// charge.*; charge.succeeded arrives routed (new_event_type); billing is
// disabled (unrouted: the first POST answered 503, sent again), enabled
// (routed again: logged only), disabled again (unrouted: again a 503 and a
// resend), enabled, disabled a third time. No event arrives after the
// first.
// Expected: each POST of one report carries one alert_id (a resend after a
// lost answer is the same alert); the three unroutings carry three.
// Fixed: every recorded report of a type (new, no longer routed, routed
// again) stamps the row's reported_at (081), and an unrouted alert is
// named by the report it follows (reported_at; alerted_at for a row last
// reported before 081), which moves only when a report is recorded.
func TestUnroutedAlertIDMovesOnEachReport(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	super, streamer := pools(t)
	exec(t, super, `INSERT INTO webhook_ingress.subscriptions (handler, provider_pattern, event_type_pattern) VALUES ('billing', 'stripe', 'charge.*')`)
	exec(t, super, `INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, event_type, raw_body, signature_verified)
		VALUES ('stripe', 'hmac', 'evt_1', 'charge.succeeded', '{}', true)`)
	// POST 0 is the new type; 1 (the first unrouting) and 3 (the second)
	// are refused, and sent again at the next check (2 and 4).
	sink := newIDSink(t, 1, 3)
	w, err := monitor.NewEventTypes(monitor.EventTypesConfig{
		DB: streamer, AlertURL: sink.URL, Metrics: prometheus.NewRegistry(), Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	check := func() {
		t.Helper()
		if err := w.Check(ctx); err != nil {
			t.Fatal(err)
		}
	}
	enabled := func(on bool) {
		t.Helper()
		exec(t, super, `UPDATE webhook_ingress.subscriptions SET enabled = $1 WHERE handler = 'billing'`, on)
	}
	check() // new_event_type, routed
	enabled(false)
	check() // unrouted: 503
	check() // sent again, taken
	enabled(true)
	check() // routed again: logged and recorded, no POST
	enabled(false)
	check() // unrouted again: 503
	check() // sent again, taken
	enabled(true)
	check()
	enabled(false)
	check() // unrouted a third time

	statuses, ids := sink.posts()
	want := []string{"new_event_type", "event_type_unrouted", "event_type_unrouted", "event_type_unrouted", "event_type_unrouted", "event_type_unrouted"}
	if !slices.Equal(statuses, want) {
		t.Fatalf("precondition: POSTs %v, want %v", statuses, want)
	}
	for i, id := range ids {
		if len(id) != 32 {
			t.Errorf("POST %d (%s): alert_id %q, want 32 hex digits", i, statuses[i], id)
		}
	}
	if ids[1] != ids[2] || ids[3] != ids[4] {
		t.Errorf("alert_id of one unrouting sent again after a 503: %q then %q, %q then %q; want one id per unrouting", ids[1], ids[2], ids[3], ids[4])
	}
	if ids[2] == ids[4] || ids[2] == ids[5] || ids[4] == ids[5] {
		t.Errorf("alert_ids of three unroutings of charge.succeeded (enabled again in between, no event since): %q %q %q; "+
			"want three ids, or a sink that drops an id it took drops the later ones", ids[2], ids[4], ids[5])
	}
	if ids[0] == ids[2] {
		t.Errorf("alert_id of the new type and of its unrouting: both %q", ids[0])
	}
}

// TestSilenceAlertIDMovesOnEachReport: the silence alerts checked for the
// flaw of review helper-334 (an alert named by something that does not move
// between two changes). silenceAlertID names a change by source_alerts'
// reported_at, which every recorded change stamps (MonitorRecordSilence),
// also "removed": a source silent, then removed from the configuration,
// then configured again and still silent with the same last_seen, gets
// three ids; the "silent" sent again after a 503 keeps its id.
func TestSilenceAlertIDMovesOnEachReport(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	super, streamer := pools(t)
	now := time.Date(2026, 11, 20, 12, 0, 0, 0, time.UTC)
	exec(t, super, `INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, raw_body, signature_verified, received_at)
		VALUES ('github', 'github', 'delivery-1', '{}', true, $1)`, now.Add(-90*time.Minute))
	sink := newIDSink(t, 2) // the second "silent" refused once, sent again
	check := func(sources ...string) {
		t.Helper()
		maxSilence := map[string]time.Duration{}
		if slices.Contains(sources, "github") {
			maxSilence["github"] = time.Hour
		}
		h, err := monitor.NewSilenceDetector(monitor.SilenceConfig{
			DB: streamer, AlertURL: sink.URL, Metrics: prometheus.NewRegistry(),
			Sources: append([]string{"stripe"}, sources...), MaxSilence: maxSilence,
			Now:    func() time.Time { return now },
			Logger: slog.New(slog.DiscardHandler),
		})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := h.Check(ctx); err != nil {
			t.Fatal(err)
		}
	}
	check("github") // silent
	check()         // removed
	check("github") // silent again, the same last_seen: 503
	check("github") // sent again, taken
	statuses, ids := sink.posts()
	if want := []string{"silent", "removed", "silent", "silent"}; !slices.Equal(statuses, want) {
		t.Fatalf("precondition: POSTs %v, want %v", statuses, want)
	}
	if ids[2] != ids[3] {
		t.Errorf("alert_id of one change sent again after a 503: %q then %q; want one id", ids[2], ids[3])
	}
	if ids[0] == ids[1] || ids[0] == ids[3] || ids[1] == ids[3] {
		t.Errorf("alert_ids of three changes (silent, removed, silent again): %q %q %q; want three ids", ids[0], ids[1], ids[3])
	}
}
