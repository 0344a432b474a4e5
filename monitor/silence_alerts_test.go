package monitor_test

// The silent-source detector's reports, against the faults a review proved
// (each test failed before 045 and the election's reconnect).

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
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/inlet-dev/inlet/internal/testwait"
	"github.com/inlet-dev/inlet/monitor"
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
