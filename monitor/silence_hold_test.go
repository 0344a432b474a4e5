package monitor_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/inlet-dev/inlet/monitor"
)

// TestSilenceOpenedByMaxSilenceClosesWhenItGoes (review helper-174, fixed; this describes the code before the fix):
// a source reported silent because of its max_silence (a rare
// source with fewer than min_events deliveries: exactly what max_silence is
// for) is held silent for ever once the operator takes that max_silence out
// of the configuration. hold() (monitor/silence.go, SilenceDetector.hold)
// holds every source that "nothing can judge" (Threshold 0) and whose
// source_alerts row says silent with a last_seen; 065/Check now records the
// last_seen of a max_silence report too (nonZero(st.LastSeen)), so the row
// qualifies although no arrival was dropped by retention. The alert is never
// closed (no "resumed", no "removed"), inlet_source_silent stays 1 with the
// removed max_silence as its threshold, and the reason given blames
// retention ("as after retention dropped the older ones"), which did nothing.
// hold's own comment says a source "watched by max_silence alone" is not
// held, and sources() documents "removed" as the end of a source "whose
// max_silence [the configuration] no longer sets". Before f008a00 the alert
// was closed at the next check.
//
// Now: once no configured rule watches the source any more and none of
// its arrivals was dropped, the open silence alert is closed (a "resumed" or
// "removed" POST, as before 065), and the source is not reported silent.
func TestSilenceOpenedByMaxSilenceClosesWhenItGoes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	super, streamer := pools(t)
	base := time.Date(2026, 3, 2, 12, 0, 0, 0, time.UTC)
	// A rare source: three signed deliveries, fewer than min_events (10).
	for i, id := range []string{"evt_r174_1", "evt_r174_2", "evt_r174_3"} {
		exec(t, super, `INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, raw_body, signature_verified, received_at)
			VALUES ('rare', 'stripe', $1, '{}', true, $2)`, id, base.Add(time.Duration(i)*time.Hour))
	}
	last := base.Add(2 * time.Hour)

	sink := &postedAlerts{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { sink.record(r) }))
	defer srv.Close()

	now := last.Add(3 * time.Hour)
	var logs strings.Builder
	var logMu sync.Mutex
	detector := func(maxSilence map[string]time.Duration) *monitor.SilenceDetector {
		h, err := monitor.NewSilenceDetector(monitor.SilenceConfig{
			DB: streamer, AlertURL: srv.URL, Metrics: prometheus.NewRegistry(),
			Sources:    []string{"rare"},
			MaxSilence: maxSilence,
			Now:        func() time.Time { return now },
			Logger:     newLogger(&logs, &logMu),
		})
		if err != nil {
			t.Fatal(err)
		}
		return h
	}

	// With max_silence rare: 1h, three hours without a delivery: silent.
	if _, err := detector(map[string]time.Duration{"rare": time.Hour}).Check(ctx); err != nil {
		t.Fatal(err)
	}
	if got := sink.take(); len(got) != 1 || got[0]["status"] != "silent" {
		t.Fatalf("first check: alerts %v, want one rare silent (max_silence 1h)", got)
	}

	// The operator removes max_silence for rare (the streamer restarts with
	// the new file). Nothing was dropped; no rule watches rare any more.
	h := detector(nil)
	var sts []monitor.SourceStatus
	for range 3 {
		now = now.Add(time.Minute)
		var err error
		if sts, err = h.Check(ctx); err != nil {
			t.Fatal(err)
		}
	}
	closed := false
	for _, a := range sink.take() {
		closed = closed || (a["source"] == "rare" && (a["status"] == "resumed" || a["status"] == "removed"))
	}
	if !closed {
		t.Errorf("after max_silence for rare was removed from the configuration, 3 checks sent no resumed/removed: " +
			"the silent alert it opened is never closed")
	}
	for _, st := range sts {
		if st.Source == "rare" && st.Silent {
			t.Errorf("rare with no max_silence and %d arrivals (none dropped) is still judged silent: %+v", 3, st)
		}
	}
}

// TestSilenceHoldWaitsForTheLatestArrival (review helper-174, fixed; this describes the code before the fix):
// source_alerts.last_seen is written only when a change is recorded
// (Check → MonitorRecordSilence). A source reported silent (last_seen L1)
// that resumes while the alert sink is down (the "resumed" POST refused, so
// not recorded) and goes silent again before the sink is back is never
// re-recorded: the next checks see silent == reported and write nothing, so
// the row keeps the stale L1 while the source's real last delivery is L2 >
// L1. When retention later leaves it fewer than min_events arrivals, hold()
// (monitor/silence.go SilenceDetector.hold: `st.LastSeen.After(*r.LastSeen)`)
// takes the remaining arrival L2 for "a delivery newer than what was
// reported", does not hold, and Check POSTs "resumed" although the provider
// has sent nothing since L2: exactly the false "resumed" 065 was written to
// stop (docs/operations.md: "a silent source whose old events retention
// drops stays silent until a newer delivery"). The same happens when the
// streamer is down (or not leading) through the resume-and-silence cycle.
//
// Now: no alert; the source stays silent with last_seen L2 until a
// delivery newer than L2.
func TestSilenceHoldWaitsForTheLatestArrival(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	super, streamer := pools(t)
	insert := func(id string, at time.Time) {
		exec(t, super, `INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, raw_body, signature_verified, received_at)
			VALUES ('stripe', 'stripe', $1, '{}', true, $2)`, id, at)
	}
	base := time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC)
	for i := range 12 { // every 10 minutes: threshold 2 × 10m = 20m
		insert("evt_r174_a"+string(rune('a'+i)), base.Add(time.Duration(i)*10*time.Minute))
	}
	l1 := base.Add(110 * time.Minute)

	var down atomicBool
	sink := &postedAlerts{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if down.get() {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		sink.record(r)
	}))
	defer srv.Close()

	now := l1.Add(30 * time.Minute)
	var logs strings.Builder
	var logMu sync.Mutex
	h, err := monitor.NewSilenceDetector(monitor.SilenceConfig{
		DB: streamer, AlertURL: srv.URL, Metrics: prometheus.NewRegistry(),
		Sources: []string{"stripe"},
		Now:     func() time.Time { return now },
		Logger:  newLogger(&logs, &logMu),
	})
	if err != nil {
		t.Fatal(err)
	}
	check := func() []monitor.SourceStatus {
		t.Helper()
		sts, err := h.Check(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return sts
	}
	check()
	if got := sink.take(); len(got) != 1 || got[0]["status"] != "silent" {
		t.Fatalf("first check: alerts %v, want one stripe silent", got)
	}

	// The alert sink goes down. Meanwhile stripe sends a burst and stops
	// again.
	down.set(true)
	burst := l1.Add(2 * time.Hour)
	for i := range 12 {
		insert("evt_r174_b"+string(rune('a'+i)), burst.Add(time.Duration(i)*10*time.Minute))
	}
	l2 := burst.Add(110 * time.Minute)
	now = l2.Add(5 * time.Minute)
	check() // resumed: the POST is refused, nothing recorded
	now = l2.Add(30 * time.Minute)
	check() // silent again: as reported, nothing recorded
	down.set(false)
	now = now.Add(time.Minute)
	check()
	for _, a := range sink.take() {
		t.Logf("alert while stripe had stopped again: %v", a)
	}

	// Retention drops the old periods: three of the burst's arrivals are
	// left, the newest being L2. No webhook arrives after L2.
	exec(t, super, `ALTER TABLE webhook_ingress.events DISABLE TRIGGER events_append_only_row`)
	exec(t, super, `DELETE FROM webhook_ingress.events WHERE provider = 'stripe' AND received_at < $1`, l2.Add(-25*time.Minute))
	exec(t, super, `ALTER TABLE webhook_ingress.events ENABLE ALWAYS TRIGGER events_append_only_row`)

	now = l2.Add(40 * 24 * time.Hour)
	sts := check()
	for _, a := range sink.take() {
		t.Errorf("stripe has sent nothing since %s, yet after retention an alert was sent: %v "+
			"(source_alerts.last_seen still says %s, the first silence's)", l2, a, l1)
	}
	for _, st := range sts {
		if st.Source == "stripe" && !st.Silent {
			t.Errorf("stripe, silent since %s, judged not silent after retention: %+v", l2, st)
		}
	}
}

type atomicBool struct {
	mu sync.Mutex
	v  bool
}

func (b *atomicBool) get() bool  { b.mu.Lock(); defer b.mu.Unlock(); return b.v }
func (b *atomicBool) set(v bool) { b.mu.Lock(); b.v = v; b.mu.Unlock() }
