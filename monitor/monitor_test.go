package monitor_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/inlet-dev/inlet/internal/database"
	"github.com/inlet-dev/inlet/internal/pgtest"
	"github.com/inlet-dev/inlet/monitor"
	"github.com/inlet-dev/inlet/schema"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// pools returns a superuser pool for seeding and one as webhook_streamer,
// which monitor runs as.
func pools(t *testing.T) (super, streamer *pgxpool.Pool) {
	t.Helper()
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	super, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(super.Close)
	streamer, err = database.Open(ctx, url, database.Options{Role: schema.StreamerRole, MaxConns: 2, AppName: "monitor-test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(streamer.Close)
	return super, streamer
}

func exec(t *testing.T, db *pgxpool.Pool, sql string, args ...any) {
	t.Helper()
	if _, err := db.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// A source that sent every 10 minutes goes silent after 2× that, with an
// injected clock; it clears when an event arrives. A fixed max_silence
// flags a source that never sent. Each change is logged and POSTed once.
func TestSilenceDetectorWithInjectedClock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	super, streamer := pools(t)
	base := time.Date(2026, 11, 20, 12, 0, 0, 0, time.UTC)
	for i := range 12 {
		exec(t, super, `INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, raw_body, signature_verified, received_at)
			VALUES ('stripe', 'stripe', $1, '{}', true, $2)`, "evt_"+string(rune('a'+i)), base.Add(time.Duration(i)*10*time.Minute))
	}
	last := base.Add(110 * time.Minute)

	var mu sync.Mutex
	var alerts []map[string]any
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var a map[string]any
		if err := json.NewDecoder(r.Body).Decode(&a); err != nil {
			t.Errorf("alert body: %v", err)
		}
		mu.Lock()
		alerts = append(alerts, a)
		mu.Unlock()
	}))
	defer hook.Close()

	now := last.Add(15 * time.Minute)
	reg := prometheus.NewRegistry()
	var logs strings.Builder
	var logMu sync.Mutex
	h, err := monitor.NewSilenceDetector(monitor.SilenceConfig{
		DB: streamer, AlertURL: hook.URL, Metrics: reg,
		MaxSilence: map[string]time.Duration{"github": time.Hour},
		Now:        func() time.Time { return now },
		Logger:     newLogger(&logs, &logMu),
	})
	if err != nil {
		t.Fatal(err)
	}
	status := func() map[string]monitor.SourceStatus {
		t.Helper()
		sts, err := h.Check(ctx)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]monitor.SourceStatus{}
		for _, s := range sts {
			out[s.Source] = s
		}
		return out
	}

	st := status()
	if s := st["stripe"]; s.Silent || s.Median != 10*time.Minute || s.Threshold != 20*time.Minute || !s.LastSeen.Equal(last) {
		t.Fatalf("stripe 15m after its last event: %+v, want not silent, median 10m, threshold 20m", s)
	}
	if s := st["github"]; !s.Silent || s.Threshold != time.Hour {
		t.Fatalf("github, never seen, max_silence 1h: %+v, want silent", s)
	}

	now = last.Add(21 * time.Minute)
	st = status()
	if s := st["stripe"]; !s.Silent || !strings.Contains(s.Reason, "2× the median gap 10m0s") {
		t.Fatalf("stripe 21m after its last event: %+v, want silent", s)
	}
	if v := gaugeValue(t, reg, "inlet_source_silent", "stripe"); v != 1 {
		t.Fatalf("inlet_source_silent{source=stripe} = %v, want 1", v)
	}
	status() // no change: no second alert

	exec(t, super, `INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, raw_body, signature_verified, received_at)
		VALUES ('stripe', 'stripe', 'evt_back', '{}', true, $1)`, now.Add(-time.Minute))
	st = status()
	if s := st["stripe"]; s.Silent {
		t.Fatalf("stripe after a new event: %+v, want cleared", s)
	}
	if v := gaugeValue(t, reg, "inlet_source_silent", "stripe"); v != 0 {
		t.Fatalf("inlet_source_silent{source=stripe} after resuming = %v, want 0", v)
	}

	mu.Lock()
	defer mu.Unlock()
	var got []string
	for _, a := range alerts {
		got = append(got, a["source"].(string)+":"+a["status"].(string))
	}
	if strings.Join(got, " ") != "github:silent stripe:silent stripe:resumed" {
		t.Fatalf("alerts posted: %v", got)
	}
	logMu.Lock()
	defer logMu.Unlock()
	if strings.Count(logs.String(), "source silent") != 2 || strings.Count(logs.String(), "source resumed") != 1 {
		t.Fatalf("log lines:\n%s", logs.String())
	}
}

func TestQueueGauges(t *testing.T) {
	t.Parallel()
	super, streamer := pools(t)
	exec(t, super, `INSERT INTO webhook_ingress.subscriptions (handler) VALUES ('billing'), ('idle')`)
	exec(t, super, `INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, raw_body, signature_verified)
		SELECT 'stripe', 'stripe', 'evt_' || g, '{}', true FROM generate_series(1, 5) g`)
	exec(t, super, `UPDATE webhook_ingress.jobs SET next_attempt_at = now() - interval '90 seconds'
		WHERE handler = 'billing' AND event_id = (SELECT min(event_id) FROM webhook_ingress.jobs)`)
	exec(t, super, `UPDATE webhook_ingress.jobs SET status = 'dead_letter' WHERE handler = 'billing' AND event_id = (SELECT max(event_id) FROM webhook_ingress.jobs)`)
	exec(t, super, `UPDATE webhook_ingress.jobs SET status = 'completed' WHERE handler = 'idle'`)

	reg := prometheus.NewRegistry()
	reg.MustRegister(monitor.NewQueue(streamer, nil))
	want := `
# HELP inlet_jobs Jobs not completed, by handler and state (pending, leased, failed, dead_letter).
# TYPE inlet_jobs gauge
inlet_jobs{handler="billing",state="dead_letter"} 1
inlet_jobs{handler="billing",state="failed"} 0
inlet_jobs{handler="billing",state="leased"} 0
inlet_jobs{handler="billing",state="pending"} 4
inlet_jobs{handler="idle",state="dead_letter"} 0
inlet_jobs{handler="idle",state="failed"} 0
inlet_jobs{handler="idle",state="leased"} 0
inlet_jobs{handler="idle",state="pending"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "inlet_jobs"); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "inlet_handler_lag_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			lag := m.GetGauge().GetValue()
			switch m.GetLabel()[0].GetValue() {
			case "billing":
				if lag < 89 || lag > 120 {
					t.Fatalf("billing lag %vs, want about 90s", lag)
				}
			case "idle":
				if lag != 0 {
					t.Fatalf("idle lag %vs, want 0", lag)
				}
			}
		}
	}
}

func newLogger(w *strings.Builder, mu *sync.Mutex) *slog.Logger {
	return slog.New(slog.NewTextHandler(lockedWriter{w, mu}, nil))
}

type lockedWriter struct {
	w  *strings.Builder
	mu *sync.Mutex
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// gaugeValue is the value of gauge name{source=source} in reg.
func gaugeValue(t *testing.T, reg *prometheus.Registry, name, source string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "source" && l.GetValue() == source {
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	t.Fatalf("no %s{source=%q}", name, source)
	return 0
}

// An alert that cannot be posted is logged without its URL: a chat webhook
// URL carries its secret in the path.
func TestSilenceAlertErrorHidesTheURL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, streamer := pools(t)
	// A server that is gone: the POST fails with a *url.Error naming the URL.
	gone := httptest.NewServer(http.NotFoundHandler())
	const secret = "T000/B000/canary-alert-secret"
	alertURL := gone.URL + "/services/" + secret + "?token=canary-alert-token"
	gone.Close()
	var logs strings.Builder
	var logMu sync.Mutex
	h, err := monitor.NewSilenceDetector(monitor.SilenceConfig{
		DB: streamer, AlertURL: alertURL, Metrics: prometheus.NewRegistry(),
		MaxSilence: map[string]time.Duration{"github": time.Minute},
		Logger:     newLogger(&logs, &logMu),
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.Check(ctx); err != nil {
		t.Fatal(err)
	}
	logMu.Lock()
	defer logMu.Unlock()
	out := logs.String()
	if !strings.Contains(out, "silence alert not sent") {
		t.Fatalf("no failed alert logged:\n%s", out)
	}
	if strings.Contains(out, "canary-alert") {
		t.Fatalf("the alert URL's secret is in the log:\n%s", out)
	}
}
