package monitor_test

// Review helper-176: one alert the sink refuses for good must not hold back
// the others.
//
// DEFECT (before the fix): postAlert (monitor/silence.go) returned the same
// error for every failure, and both Check loops (SilenceDetector.Check,
// EventTypes.Check) stopped posting at the first one ("post = false", meant
// for a sink that is down or hangs). A sink that refuses one payload for
// good (a chat webhook rejecting a field, a schema validator: 400 or 422,
// the same answer on every retry) got that alert first again at every check
// (sources and types in name order), so no later change was ever posted:
// one source's refused "silent" held back every other source's alerts, and
// one refused new-type alert every other type's, for ever. The refused one
// was also retried at every check for ever.
//
// Now: only a sink that is not reached, times out, or answers 5xx, 408 or
// 429, or a 4xx refusing every alert (401, 403, 404, ...), stops the
// check's remaining posts (they are retried next check). A 4xx refusing
// the payload (400, 422, ...) is that alert's alone: logged at ERROR ("alert refused by
// the sink, not retried"), counted in inlet_alerts_refused_total{kind}, and
// recorded as reported; the other changes are still posted. A 3xx (a wrong
// URL) does not stop the others either, and stays retried.
//
// The 400, 422 and 308 cases below failed before the fix (only the first,
// refused, alert was ever POSTed, at every check; nothing recorded, logged
// at ERROR or counted); the 408, 429 and 503 cases passed before and after:
// they pin that a sink that is down still stops the check and is retried.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/inlet-dev/inlet/monitor"
)

// pickySink is an alert sink that answers `status` to the alerts whose
// field `field` equals `refuse` (only the first such alert when once), and
// takes the others. It counts the POSTs per value of that field.
type pickySink struct {
	srv           *httptest.Server
	field, refuse string
	status        int
	once          bool

	mu    sync.Mutex
	posts map[string]int // field value → POSTs received
	taken []string       // field values accepted, in order
}

func newPickySink(t *testing.T, field, refuse string, status int, once bool) *pickySink {
	t.Helper()
	s := &pickySink{field: field, refuse: refuse, status: status, once: once, posts: map[string]int{}}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var a map[string]any
		_ = json.NewDecoder(r.Body).Decode(&a)
		v := fmt.Sprint(a[s.field])
		s.mu.Lock()
		defer s.mu.Unlock()
		s.posts[v]++
		if v == s.refuse && (!s.once || s.posts[v] == 1) {
			if s.status/100 == 3 {
				w.Header().Set("Location", "/elsewhere")
			}
			w.WriteHeader(s.status)
			return
		}
		s.taken = append(s.taken, v)
	}))
	t.Cleanup(s.srv.Close)
	return s
}

// state is what the sink took (sorted) and how often the refused value was
// POSTed.
func (s *pickySink) state() (taken []string, refusedPosts int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	taken = slices.Clone(s.taken)
	slices.Sort(taken)
	return taken, s.posts[s.refuse]
}

// refusedCase is the sink's answer to the first alert of a check (in name
// order) and what must follow over two checks.
type refusedCase struct {
	status int
	// down: the answer says the sink cannot take alerts now; it gives it
	// once (then takes everything), and the check posts no more after it.
	down bool
	// forGood: a refusal of that payload alone, not retried: recorded as
	// reported, logged at ERROR and counted.
	forGood bool
}

var refusedCases = []refusedCase{
	{status: http.StatusBadRequest, forGood: true},
	{status: http.StatusUnprocessableEntity, forGood: true},
	{status: http.StatusPermanentRedirect}, // a wrong URL: the others posted, retried every check
	{status: http.StatusTooManyRequests, down: true},
	{status: http.StatusRequestTimeout, down: true},
	{status: http.StatusServiceUnavailable, down: true},
	// A revoked token or a wrong path refuses every alert: held, as a sink
	// that is down, and all sent once it takes them.
	{status: http.StatusUnauthorized, down: true},
	{status: http.StatusNotFound, down: true},
}

// expect checks the sink after the first check (first) or the second, for
// the refused value and the two others.
func (tc refusedCase) expect(t *testing.T, sink *pickySink, first bool, refused string, others []string) {
	t.Helper()
	taken, posts := sink.state()
	want, wantPosts := others, 1
	switch {
	case first && tc.down:
		want = nil // the check stopped at the refused one
	case !first && tc.down:
		want, wantPosts = append([]string{refused}, others...), 2 // all sent again, taken
	case !first && !tc.forGood:
		wantPosts = 2 // the 3xx: retried
	}
	when := "after the first check"
	if !first {
		when = "after the second check"
	}
	if !slices.Equal(taken, want) {
		t.Errorf("%s, the first alert (%s) answered %d: alerts taken %v, want %v", when, refused, tc.status, taken, want)
	}
	if posts != wantPosts {
		t.Errorf("%s, the alert of %s (answered %d) was POSTed %d times, want %d", when, refused, tc.status, posts, wantPosts)
	}
}

func TestSilenceAlertRefusedForOneSourceDoesNotHoldTheOthers(t *testing.T) {
	t.Parallel()
	for _, tc := range refusedCases {
		t.Run(fmt.Sprint(tc.status), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			super, streamer := pools(t)
			sink := newPickySink(t, "source", "a_refused", tc.status, tc.down)
			var logs strings.Builder
			var logMu sync.Mutex
			reg := prometheus.NewRegistry()
			// Three configured sources that never sent, each with a
			// max_silence: all silent at the first check. a_refused comes
			// first in name order.
			h, err := monitor.NewSilenceDetector(monitor.SilenceConfig{
				DB: streamer, AlertURL: sink.srv.URL, Metrics: reg,
				MaxSilence: map[string]time.Duration{"a_refused": time.Hour, "b_src": time.Hour, "c_src": time.Hour},
				Logger:     newLogger(&logs, &logMu),
			})
			if err != nil {
				t.Fatal(err)
			}
			others := []string{"b_src", "c_src"}
			if _, err := h.Check(ctx); err != nil {
				t.Fatal(err)
			}
			tc.expect(t, sink, true, "a_refused", others)
			if _, err := h.Check(ctx); err != nil {
				t.Fatal(err)
			}
			tc.expect(t, sink, false, "a_refused", others)

			var recorded bool
			err = super.QueryRow(ctx, `SELECT silent FROM webhook_ingress.source_alerts WHERE source = 'a_refused'`).Scan(&recorded)
			if err != nil && !errors.Is(err, pgx.ErrNoRows) {
				t.Fatal(err)
			}
			if want := tc.forGood || tc.down; recorded != want {
				t.Errorf("a_refused recorded as reported silent: %v, want %v (answered %d)", recorded, want, tc.status)
			}
			logMu.Lock()
			logged := logs.String()
			logMu.Unlock()
			errLine := `level=ERROR msg="silence alert refused by the sink, not retried" source=a_refused status=` + fmt.Sprint(tc.status)
			if got := strings.Contains(logged, errLine); got != tc.forGood {
				t.Errorf("ERROR line %q logged: %v, want %v; log:\n%s", errLine, got, tc.forGood, logged)
			}
			if got, want := refusedCount(t, reg, "silence"), b2f(tc.forGood); got != want {
				t.Errorf("inlet_alerts_refused_total{kind=silence} = %g, want %g", got, want)
			}
		})
	}
}

func TestEventTypeAlertRefusedForOneTypeDoesNotHoldTheOthers(t *testing.T) {
	t.Parallel()
	for _, tc := range refusedCases {
		t.Run(fmt.Sprint(tc.status), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			super, streamer := pools(t)
			// Types are reported in (source, type) order: a.refused first.
			for i, typ := range []string{"a.refused", "b.type", "c.type"} {
				exec(t, super, `INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, event_type, raw_body, signature_verified)
					VALUES ('github', 'github', $1, $2, '{}', true)`, fmt.Sprintf("d%d", i), typ)
			}
			sink := newPickySink(t, "event_type", "a.refused", tc.status, tc.down)
			var logs strings.Builder
			var logMu sync.Mutex
			reg := prometheus.NewRegistry()
			w, err := monitor.NewEventTypes(monitor.EventTypesConfig{
				DB: streamer, AlertURL: sink.srv.URL, Metrics: reg, Logger: newLogger(&logs, &logMu),
			})
			if err != nil {
				t.Fatal(err)
			}
			others := []string{"b.type", "c.type"}
			if err := w.Check(ctx); err != nil {
				t.Fatal(err)
			}
			tc.expect(t, sink, true, "a.refused", others)
			if err := w.Check(ctx); err != nil {
				t.Fatal(err)
			}
			tc.expect(t, sink, false, "a.refused", others)

			var alerted bool
			if err := super.QueryRow(ctx, `SELECT alerted_at IS NOT NULL FROM webhook_ingress.event_types
				WHERE provider = 'github' AND event_type = 'a.refused'`).Scan(&alerted); err != nil {
				t.Fatal(err)
			}
			if want := tc.forGood || tc.down; alerted != want {
				t.Errorf("a.refused's alerted_at set: %v, want %v (answered %d)", alerted, want, tc.status)
			}
			logMu.Lock()
			logged := logs.String()
			logMu.Unlock()
			errLine := `level=ERROR msg="new event type alert refused by the sink, not retried" source=github event_type=a.refused`
			got := strings.Contains(logged, errLine) && strings.Contains(logged, "status="+fmt.Sprint(tc.status))
			if got != tc.forGood {
				t.Errorf("ERROR line %q (status=%d) logged: %v, want %v; log:\n%s", errLine, tc.status, got, tc.forGood, logged)
			}
			if got, want := refusedCount(t, reg, "event_type"), b2f(tc.forGood); got != want {
				t.Errorf("inlet_alerts_refused_total{kind=event_type} = %g, want %g", got, want)
			}
		})
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// refusedCount is inlet_alerts_refused_total{kind} in reg (0 when it is
// not registered: the test then fails on its value).
func refusedCount(t *testing.T, reg *prometheus.Registry, kind string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "inlet_alerts_refused_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "kind" && l.GetValue() == kind {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// The streamer registers both monitors in one registry: each exports its
// own kind of inlet_alerts_refused_total, at 0 before any refusal.
func TestAlertsRefusedCounterOfBothMonitorsInOneRegistry(t *testing.T) {
	t.Parallel()
	_, streamer := pools(t)
	reg := prometheus.NewRegistry()
	if _, err := monitor.NewSilenceDetector(monitor.SilenceConfig{DB: streamer, Metrics: reg}); err != nil {
		t.Fatal(err)
	}
	if _, err := monitor.NewEventTypes(monitor.EventTypesConfig{DB: streamer, Metrics: reg}); err != nil {
		t.Fatalf("event-type watcher beside the silence detector in one registry: %v", err)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, f := range families {
		if f.GetName() == "inlet_alerts_refused_total" {
			for _, m := range f.GetMetric() {
				for _, l := range m.GetLabel() {
					kinds = append(kinds, l.GetName()+"="+l.GetValue())
				}
			}
		}
	}
	slices.Sort(kinds)
	if !slices.Equal(kinds, []string{"kind=event_type", "kind=silence"}) {
		t.Errorf("inlet_alerts_refused_total series: %v, want kind=event_type and kind=silence", kinds)
	}
}
