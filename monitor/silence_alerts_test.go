package monitor_test

// The silent-source detector's reports, against the faults reviews proved
// (each test failed before 045 and the election's reconnect, or, the
// helper-168 ones below, before 065 and the alert client's fixes).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/inlet-dev/inlet/internal/testwait"
	"github.com/inlet-dev/inlet/monitor"
	"github.com/inlet-dev/inlet/schema"
)

// alertSink is an alert endpoint that records the alerts it accepted
// ("source status") and refuses the first `refuse` requests with 503.
type alertSink struct {
	srv    *httptest.Server
	mu     sync.Mutex
	got    []string
	refuse atomic.Int32
	calls  atomic.Int32
}

func newReviewSink(t *testing.T) *alertSink {
	s := &alertSink{}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.calls.Add(1)
		var a struct{ Source, Status string }
		_ = json.NewDecoder(r.Body).Decode(&a)
		if s.refuse.Add(-1) >= 0 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		s.mu.Lock()
		s.got = append(s.got, a.Source+" "+a.Status)
		s.mu.Unlock()
	}))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *alertSink) alerts() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.got...)
}

type reviewClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *reviewClock) Now() time.Time  { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *reviewClock) Set(t time.Time) { c.mu.Lock(); c.now = t; c.mu.Unlock() }

func reviewDetector(t *testing.T, db *pgxpool.Pool, url string, clock *reviewClock, leader *monitor.Leader) *monitor.SilenceDetector {
	t.Helper()
	var logs strings.Builder
	var logMu sync.Mutex
	cfg := monitor.SilenceConfig{
		DB: db, AlertURL: url, Metrics: prometheus.NewRegistry(),
		MaxSilence: map[string]time.Duration{"github": time.Hour},
		Now:        clock.Now,
		Logger:     newLogger(&logs, &logMu),
	}
	if leader != nil {
		cfg.Leader = leader
	}
	h, err := monitor.NewSilenceDetector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func reviewCheck(t *testing.T, h *monitor.SilenceDetector) {
	t.Helper()
	if _, err := h.Check(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// The alert endpoint fails once (a 503 during its own deploy): the "silent"
// alert is sent again at the next check (045: what was reported moves only
// once the alert was taken). It was lost before.
func TestSilenceAlertSentAgainAfterAFailedPost(t *testing.T) {
	t.Parallel()
	_, streamer := pools(t)
	sink := newReviewSink(t)
	sink.refuse.Store(1)
	clock := &reviewClock{now: time.Date(2026, 11, 20, 12, 0, 0, 0, time.UTC)}
	h := reviewDetector(t, streamer, sink.srv.URL, clock, nil)

	for range 3 { // github has max_silence 1h and never sent: silent throughout
		reviewCheck(t, h)
		clock.Set(clock.Now().Add(time.Minute))
	}
	if got := sink.alerts(); len(got) != 1 || got[0] != "github silent" {
		t.Fatalf("alerts accepted by the sink after 3 checks (the first POST refused with 503, %d POSTs in all): %v; want [github silent]",
			sink.calls.Load(), got)
	}
}

// A streamer restarts (a deploy) while a source is silent and already
// alerted: the new process does not alert it again, and "resumed" is sent
// for a source that recovered while it was down (045: the reported state is
// in the database, not in each process's memory).
func TestSilenceRestartNeitherRepeatsNorLosesAnAlert(t *testing.T) {
	t.Parallel()
	super, streamer := pools(t)
	sink := newReviewSink(t)
	clock := &reviewClock{now: time.Date(2026, 11, 20, 12, 0, 0, 0, time.UTC)}

	before := reviewDetector(t, streamer, sink.srv.URL, clock, nil)
	reviewCheck(t, before) // github silent: alerted
	clock.Set(clock.Now().Add(time.Minute))

	restarted := reviewDetector(t, streamer, sink.srv.URL, clock, nil)
	reviewCheck(t, restarted) // still silent: no change, nothing to send
	if got := sink.alerts(); len(got) != 1 {
		t.Errorf("alerts after a restart with github still silent: %v; want one [github silent]", got)
	}

	// github resumes while the streamer restarts once more.
	exec(t, super, `INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, raw_body, signature_verified, received_at)
		VALUES ('github', 'github', 'delivery-1', '{}', true, $1)`, clock.Now().Add(-10*time.Second))
	again := reviewDetector(t, streamer, sink.srv.URL, clock, nil)
	reviewCheck(t, again)
	got := sink.alerts()
	if len(got) == 0 || got[len(got)-1] != "github resumed" {
		t.Errorf("alerts after github resumed across a restart: %v; want the last to be \"github resumed\"", got)
	}
}

// Two streamers; b is a follower. github goes silent; b's check sees it
// first and leaves the report to the leader. The leader a stops before its
// own next check; b takes the lead at its next check and reports it (045:
// a follower moves nothing). It was never alerted by anyone before.
func TestSilenceChangeReportedByTheNextLeader(t *testing.T) {
	t.Parallel()
	super, streamer := pools(t)
	sink := newReviewSink(t)
	clock := &reviewClock{now: time.Date(2026, 11, 20, 12, 0, 0, 0, time.UTC)}
	exec(t, super, `INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, raw_body, signature_verified, received_at)
		VALUES ('github', 'github', 'delivery-1', '{}', true, $1)`, clock.Now().Add(-30*time.Minute))

	la, lb := monitor.NewLeader(streamer.Config().ConnConfig), monitor.NewLeader(streamer.Config().ConnConfig)
	t.Cleanup(la.Close)
	t.Cleanup(lb.Close)
	a := reviewDetector(t, streamer, sink.srv.URL, clock, la)
	b := reviewDetector(t, streamer, sink.srv.URL, clock, lb)
	reviewCheck(t, a) // a leads; github seen 30m ago: not silent
	reviewCheck(t, b)

	clock.Set(clock.Now().Add(time.Hour)) // github now silent for 1h30m > max_silence 1h
	reviewCheck(t, b)                     // follower: sees the change, leaves it to a
	la.Close()                            // a stops before its next check
	// Its session ends a moment after its connection closes (the server
	// releases the lock then): b leads once it has.
	testwait.Eventually(t, 10*time.Second, "b to lead once a's session ended", func() (bool, string) {
		l, err := lb.Leading(context.Background())
		return err == nil && l, fmt.Sprintf("leading %v, %v", l, err)
	})
	reviewCheck(t, b) // b leads now
	reviewCheck(t, b)
	if got := sink.alerts(); len(got) != 1 || got[0] != "github silent" {
		t.Fatalf("alerts after the leader stopped: %v; want [github silent] (github is silent, and b now leads)", got)
	}
}

// The database restarts (or a proxy drops idle connections): every
// replica's election connection is gone. A follower's lock query on its
// stale connection fails; Leading tries once more on a fresh one, so one
// election settles who reports. (Before, the follower reported the change as
// well: the first change after every database restart was alerted by every
// replica.)
func TestSilenceOneReplicaAlertsAfterElectionConnectionsDrop(t *testing.T) {
	t.Parallel()
	super, streamer := pools(t)
	sink := newReviewSink(t)
	clock := &reviewClock{now: time.Date(2026, 11, 20, 12, 0, 0, 0, time.UTC)}
	exec(t, super, `INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, raw_body, signature_verified, received_at)
		VALUES ('github', 'github', 'delivery-1', '{}', true, $1)`, clock.Now().Add(-30*time.Minute))

	la, lb := monitor.NewLeader(streamer.Config().ConnConfig), monitor.NewLeader(streamer.Config().ConnConfig)
	t.Cleanup(la.Close)
	t.Cleanup(lb.Close)
	a := reviewDetector(t, streamer, sink.srv.URL, clock, la)
	b := reviewDetector(t, streamer, sink.srv.URL, clock, lb)
	reviewCheck(t, a) // a leads
	reviewCheck(t, b)

	// Every election connection dropped, as by a database restart.
	exec(t, super, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND application_name = $1`, monitor.ElectionAppName)
	deadline := time.Now().Add(10 * time.Second)
	for {
		var n int
		if err := super.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name = $1`, monitor.ElectionAppName).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d election backends still there", n)
		}
		time.Sleep(20 * time.Millisecond)
	}

	clock.Set(clock.Now().Add(time.Hour)) // github silent
	reviewCheck(t, a)
	reviewCheck(t, b)
	if got := sink.alerts(); len(got) != 1 {
		t.Fatalf("alerts for one change after the election connections dropped: %v; want one", got)
	}
}

// postedAlerts records the JSON alerts POSTed to it.
type postedAlerts struct {
	mu  sync.Mutex
	got []map[string]any
}

func (s *postedAlerts) record(r *http.Request) {
	var a map[string]any
	_ = json.NewDecoder(r.Body).Decode(&a)
	s.mu.Lock()
	s.got = append(s.got, a)
	s.mu.Unlock()
}

func (s *postedAlerts) take() []map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	got := s.got
	s.got = nil
	return got
}

// TestSilenceRetentionDropKeepsSourceSilent (review helper-168, fixed; this
// describes the code before the fix): a source reported silent whose old
// events leave the log (inlet retention drops the old periods:
// retention.max_age; simulated here by deleting them as the owner would by
// dropping their partition) is reported "resumed" although no webhook
// arrived. With no arrivals left, judge() (monitor/silence.go) gives the
// source no threshold and Silent=false; Check compares that with
// source_alerts (silent=true) and POSTs {"status":"resumed"}. The on-call
// sees the incident closed while the provider is still not sending: the
// exact case the detector exists for (a provider that disabled the endpoint
// weeks ago), closed silently by the routine retention job. (With no
// sources: configured, the same source is instead reported "removed … no
// longer a configured source", equally wrong.)
//
// Now: only a new delivery resumes a source; losing history to retention
// leaves it silent (065: source_alerts keeps the last_seen reported), with
// or without sources: configured, and a delivery after that resumes it.
func TestSilenceRetentionDropKeepsSourceSilent(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		sources []string
	}{
		{"sources configured", []string{"stripe"}},
		{"no sources configured", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			super, streamer := pools(t)
			base := time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC)
			for i := range 12 {
				exec(t, super, `INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, raw_body, signature_verified, received_at)
					VALUES ('stripe', 'stripe', $1, '{}', true, $2)`, "evt_r168_"+string(rune('a'+i)), base.Add(time.Duration(i)*10*time.Minute))
			}
			last := base.Add(110 * time.Minute)

			sink := &postedAlerts{}
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { sink.record(r) }))
			defer srv.Close()

			now := last.Add(40 * 24 * time.Hour) // stripe stopped delivering 40 days ago
			var logs strings.Builder
			var logMu sync.Mutex
			h, err := monitor.NewSilenceDetector(monitor.SilenceConfig{
				DB: streamer, AlertURL: srv.URL, Metrics: prometheus.NewRegistry(),
				Sources: tc.sources,
				Now:     func() time.Time { return now },
				Logger:  newLogger(&logs, &logMu),
			})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := h.Check(ctx); err != nil {
				t.Fatal(err)
			}
			first := sink.take()
			if len(first) != 1 || first[0]["status"] != "silent" {
				t.Fatalf("first check: alerts %v, want one stripe silent", first)
			}

			// Retention (max_age 30 days) drops the periods that held
			// stripe's events. No webhook arrived.
			exec(t, super, `ALTER TABLE webhook_ingress.events DISABLE TRIGGER events_append_only_row`)
			exec(t, super, `DELETE FROM webhook_ingress.events WHERE provider = 'stripe'`)
			exec(t, super, `ALTER TABLE webhook_ingress.events ENABLE ALWAYS TRIGGER events_append_only_row`)

			now = now.Add(time.Minute)
			sts, err := h.Check(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, a := range sink.take() {
				t.Errorf("after retention dropped stripe's old events, with no new webhook, an alert was sent: %v "+
					"(the silent alert is closed although the provider still does not deliver)", a)
			}
			held := false
			for _, st := range sts {
				if st.Source == "stripe" {
					held = st.Silent && st.LastSeen.Equal(last)
				}
			}
			if !held {
				t.Errorf("stripe after its history was dropped: %+v; want silent, last seen %s", sts, last)
			}

			// A delivery does resume it, although one arrival is too few
			// to judge by.
			exec(t, super, `INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, raw_body, signature_verified, received_at)
				VALUES ('stripe', 'stripe', 'evt_r168_new', '{}', true, $1)`, now.Add(-time.Second))
			if _, err := h.Check(ctx); err != nil {
				t.Fatal(err)
			}
			if got := sink.take(); len(got) != 1 || got[0]["status"] != "resumed" {
				t.Errorf("alerts after stripe delivered again: %v; want one stripe resumed", got)
			}
		})
	}
}

// TestSilenceHangingSinkHoldsCheckOneTimeout (review helper-168, fixed; this
// describes the code before the fix): with an alert sink that accepts the
// connection and never answers (a chat webhook behind a hung proxy),
// SilenceDetector.Check POSTs every changed source one after another, each
// waiting the client's whole timeout (10 s by default): N sources that go
// silent together (the common case: ingress or its load balancer is down,
// so every source stops at once) hold one check for N × 10 s, and, as none
// of them is recorded, every later check too. Meanwhile the detector judges
// nothing (check_every is in effect N × 10 s): a source that resumes, or
// another that goes silent, is not seen for minutes, and a streamer's
// shutdown waits on it. The event-type watcher had this very defect and was
// fixed (review helper-83, monitor/eventtypes.go Check); the silence
// detector was not: its loop went on to the next source's POST after a
// failed one.
//
// Now: one check takes at most about one alert timeout whatever the number
// of changed sources; after the first failed POST the rest are logged, not
// posted, and not recorded (the next check sends them).
func TestSilenceHangingSinkHoldsCheckOneTimeout(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	super, streamer := pools(t)
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body) // then the server notices the client hanging up
		select {                           // never answers
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer srv.Close()
	defer close(release) // runs before srv.Close

	// Eight configured sources with max_silence and no event yet: all
	// silent at the first check.
	maxSilence := map[string]time.Duration{}
	for _, s := range []string{"a", "b", "c", "d", "e", "f", "g", "h"} {
		maxSilence["src_"+s] = time.Hour
	}
	// 1 s: the check also claims each source's report in a transaction of its
	// own (8 here), which took ~0.8 s on a loaded CI run (945fd5a, with a
	// 250 ms timeout); a wait per source would take 8 s.
	const timeout = time.Second
	var logs strings.Builder
	var logMu sync.Mutex
	h, err := monitor.NewSilenceDetector(monitor.SilenceConfig{
		DB: streamer, AlertURL: srv.URL, Metrics: prometheus.NewRegistry(),
		MaxSilence: maxSilence,
		HTTPClient: &http.Client{Timeout: timeout},
		Logger:     newLogger(&logs, &logMu),
	})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := h.Check(ctx); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	if took > 3*timeout {
		t.Errorf("one check took %s with a sink that does not answer (alert timeout %s, %d silent sources): "+
			"each source waited a whole timeout; with the default 10s timeout and %d sources that is %s per check, every check",
			took.Round(time.Millisecond), timeout, len(maxSilence), len(maxSilence), time.Duration(len(maxSilence))*10*time.Second)
	}
	logMu.Lock()
	lines := strings.Count(logs.String(), `msg="source silent"`)
	logMu.Unlock()
	if lines != len(maxSilence) {
		t.Errorf("%d \"source silent\" lines for %d silent sources: every change is logged, posted or not", lines, len(maxSilence))
	}
	var recorded int
	// Silent rows: a claim (review helper-323) adds a row saying "not
	// reported silent", as no row does, to lock.
	if err := super.QueryRow(ctx, `SELECT count(*) FROM webhook_ingress.source_alerts WHERE silent`).Scan(&recorded); err != nil {
		t.Fatal(err)
	}
	if recorded != 0 {
		t.Errorf("%d reports recorded although no alert was taken: they would never be sent", recorded)
	}
}

// TestAlertRedirectIsRefusedAndRetried (review helper-168, fixed; this
// describes the code before the fix): the alert POST follows redirects with
// Go's default policy: a 301 or 302 from the alert URL (http → https, a
// trailing-slash or moved endpoint) turns the POST into a GET without the
// body. If that GET is answered 2xx, postAlert (monitor/silence.go) reports
// the alert taken, and Check records it in source_alerts: the alert is
// never delivered and never sent again. (A GET answered 405 is at least
// retried, but logged as "alert refused status 405", naming the wrong
// cause.) The same postAlert sends the event-type alerts (event_types.
// alerted_at is then set). NewSilenceDetector and NewEventTypes built
// &http.Client{Timeout: 10s} with no CheckRedirect.
//
// Now: an alert counts as sent only when the alert URL itself accepted the
// POSTed JSON; the default clients follow no redirect, so a 3xx is a
// refusal, logged with its status and retried.
func TestAlertRedirectIsRefusedAndRetried(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	super, streamer := pools(t)
	sink := &postedAlerts{}
	mux := http.NewServeMux()
	mux.HandleFunc("/hook", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/hook/", http.StatusMovedPermanently)
	})
	mux.HandleFunc("/hook/", func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			sink.record(r)
			return
		}
		_, _ = io.WriteString(w, "alert receiver: POST JSON here\n") // a GET gets the endpoint's help page
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()

	var logs strings.Builder
	var logMu sync.Mutex
	h, err := monitor.NewSilenceDetector(monitor.SilenceConfig{
		DB: streamer, AlertURL: srv.URL + "/hook", Metrics: prometheus.NewRegistry(),
		MaxSilence: map[string]time.Duration{"github": time.Hour},
		Logger:     newLogger(&logs, &logMu),
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.Check(ctx); err != nil {
		t.Fatal(err)
	}
	delivered := false
	for _, a := range sink.take() {
		delivered = delivered || (a["source"] == "github" && a["status"] == "silent")
	}
	var recorded bool
	err = super.QueryRow(ctx, `SELECT silent FROM webhook_ingress.source_alerts WHERE source = 'github'`).Scan(&recorded)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		t.Fatal(err)
	}
	logMu.Lock()
	logged := logs.String()
	logMu.Unlock()
	if !delivered && recorded {
		t.Errorf("the github silent alert never reached the sink (the redirect made it a GET without body), yet source_alerts "+
			"records it as reported: it will never be sent again; log: %s", logged)
	}
	if !strings.Contains(logged, `msg="silence alert refused"`) || !strings.Contains(logged, "status=301") {
		t.Errorf("the redirect is not logged as a refusal with its status: %s", logged)
	}
}

// A source already reported silent when 065 is applied (its row without
// last_seen, as 045 wrote it) gets its newest signed arrival as last_seen,
// so retention dropping its events after the upgrade does not resume it
// either. 065's backfill statement is run on such a row.
func TestSilenceReportedBefore065HeldAfterRetention(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	super, streamer := pools(t)
	base := time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC)
	for i := range 12 {
		exec(t, super, `INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, raw_body, signature_verified, received_at)
			VALUES ('stripe', 'stripe', $1, '{}', true, $2)`, fmt.Sprintf("evt_%d", i), base.Add(time.Duration(i)*10*time.Minute))
	}
	last := base.Add(110 * time.Minute)
	// Stored by inlet backfill from the provider's API: no delivery.
	exec(t, super, `INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, raw_body, signature_verified, received_at)
		VALUES ('stripe', 'stripe', 'evt_backfilled', '{}', false, $1)`, last.Add(time.Hour))
	exec(t, super, `INSERT INTO webhook_ingress.source_alerts (source, silent) VALUES ('stripe', true)`)

	ms, err := schema.Migrations()
	if err != nil {
		t.Fatal(err)
	}
	var backfill string
	for _, m := range ms {
		if m.Version == 65 {
			backfill = m.SQL[strings.Index(m.SQL, "UPDATE webhook_ingress.source_alerts"):]
		}
	}
	if backfill == "" {
		t.Fatal("065's backfill statement not found")
	}
	exec(t, super, backfill)
	var lastSeen *time.Time
	if err := super.QueryRow(ctx, `SELECT last_seen FROM webhook_ingress.source_alerts WHERE source = 'stripe'`).Scan(&lastSeen); err != nil {
		t.Fatal(err)
	}
	if lastSeen == nil || !lastSeen.Equal(last) {
		t.Fatalf("065 backfilled stripe's last_seen %v; want its newest signed arrival %s", lastSeen, last)
	}

	exec(t, super, `ALTER TABLE webhook_ingress.events DISABLE TRIGGER events_append_only_row`)
	exec(t, super, `DELETE FROM webhook_ingress.events WHERE provider = 'stripe'`)
	exec(t, super, `ALTER TABLE webhook_ingress.events ENABLE ALWAYS TRIGGER events_append_only_row`)
	sink := newReviewSink(t)
	clock := &reviewClock{now: last.Add(40 * 24 * time.Hour)}
	var logs strings.Builder
	var logMu sync.Mutex
	h, err := monitor.NewSilenceDetector(monitor.SilenceConfig{
		DB: streamer, AlertURL: sink.srv.URL, Metrics: prometheus.NewRegistry(),
		Sources: []string{"stripe"}, Now: clock.Now, Logger: newLogger(&logs, &logMu),
	})
	if err != nil {
		t.Fatal(err)
	}
	sts, err := h.Check(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := sink.alerts(); len(got) != 0 {
		t.Errorf("alerts after retention dropped stripe's events, no delivery since: %v; want none", got)
	}
	if len(sts) != 1 || !sts[0].Silent || !sts[0].LastSeen.Equal(last) {
		t.Errorf("stripe judged %+v; want silent, last seen %s", sts, last)
	}
}
