package monitor_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/inlet-dev/inlet/internal/database"
	"github.com/inlet-dev/inlet/internal/pgtest"
	"github.com/inlet-dev/inlet/internal/testwait"
	"github.com/inlet-dev/inlet/monitor"
	"github.com/inlet-dev/inlet/schema"
)

// TestDeposedLeaderDoesNotAlertTwice (review helper-323, fixed).
// Defect: with several streamers, one silence change is POSTed twice when
// the leader's election connection dies while its alert is in flight (a
// slow sink: the POST may take up to the alert client's 10 s). docs/
// operations.md promises "only the one holding the reporter lock ... logs
// and POSTs a change, so each change is alerted once; when that streamer or
// its connection dies, another takes over at its next check". The leader
// checks its lead once, before posting (monitor/silence.go Check ->
// Leader.Leading), and records the report (source_alerts) only after the
// POST returns; nothing fences it: the next leader reads source_alerts
// unchanged and POSTs the same alert, then the deposed leader's POST
// completes and it records it again. The same holds for the event-type
// alerts (monitor/eventtypes.go Check/report: event_types.alerted_at is
// set after the POST). The alert carries no id a sink could dedupe on.
// Setup: real PostgreSQL; two SilenceDetectors (a, b) with their own
// Leaders, as two streamers; github's max_silence 1h, its last event 90 min
// ago (injected clock). a leads and POSTs "github silent" to a sink that
// holds the request; a's election backend is terminated
// (pg_terminate_backend: a proxy's idle cut, a network blip, a failover of
// a pooler); b takes the lead and checks; then the sink answers a.
// Expected: one "github silent" alert.
// Observed: 2 alerts: [/b: github silent /a: github silent].
// Fixed: each change is claimed in PostgreSQL before it is posted
// (SilenceDetector.claimReport): its source_alerts row (inserted first if
// missing) is locked with SELECT ... FOR UPDATE SKIP LOCKED in a
// transaction on the pool, bounded past the POST's timeout, across the
// POST and the record, and re-checked on the locked row; a new leader
// skips a change whose POST is in flight and finds it reported after the
// commit. The same for event_types rows (EventTypes.claimReport), and each
// alert carries an alert_id a sink can dedupe on.
func TestDeposedLeaderDoesNotAlertTwice(t *testing.T) {
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	super, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(super.Close)
	streamer, err := database.Open(ctx, url, database.Options{Role: schema.StreamerRole, MaxConns: 4, AppName: "alert-once"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(streamer.Close)
	now := time.Date(2026, 11, 20, 12, 0, 0, 0, time.UTC)
	if _, err := super.Exec(ctx, `INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, raw_body, signature_verified, received_at)
		VALUES ('github', 'github', 'delivery-323', '{}', true, $1)`, now.Add(-90*time.Minute)); err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	var got []string
	arrived := make(chan string, 8)
	release := make(chan struct{})
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var a struct{ Source, Status string }
		_ = json.NewDecoder(r.Body).Decode(&a)
		arrived <- r.URL.Path
		if r.URL.Path == "/a" {
			<-release // a slow sink: replica a's POST is in flight
		}
		mu.Lock()
		got = append(got, r.URL.Path+": "+a.Source+" "+a.Status)
		mu.Unlock()
	}))
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	t.Cleanup(sink.Close)
	t.Cleanup(unblock) // runs before sink.Close

	detector := func(path string, l *monitor.Leader) *monitor.SilenceDetector {
		h, err := monitor.NewSilenceDetector(monitor.SilenceConfig{
			DB: streamer, AlertURL: sink.URL + path, Metrics: prometheus.NewRegistry(), Leader: l,
			MaxSilence: map[string]time.Duration{"github": time.Hour},
			Now:        func() time.Time { return now },
			Logger:     slog.New(slog.DiscardHandler),
		})
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	la, lb := monitor.NewLeader(streamer.Config().ConnConfig), monitor.NewLeader(streamer.Config().ConnConfig)
	t.Cleanup(la.Close)
	t.Cleanup(lb.Close)
	a, b := detector("/a", la), detector("/b", lb)

	// a leads and POSTs "github silent"; the sink holds the request.
	aDone := make(chan error, 1)
	go func() { _, err := a.Check(ctx); aDone <- err }()
	select {
	case p := <-arrived:
		if p != "/a" {
			t.Fatalf("first alert from %s; want a's", p)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("a never posted")
	}
	// a's election connection dies while its pool and its POST go on.
	if _, err := super.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE datname = current_database() AND application_name = $1`, monitor.ElectionAppName); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, 60*time.Second, "b to lead once a's election session ended", func() (bool, string) {
		l, err := lb.Leading(ctx)
		return err == nil && l, fmt.Sprintf("leading %v, %v", l, err)
	})
	if _, err := b.Check(ctx); err != nil { // b now leads: its next check
		t.Fatal(err)
	}
	unblock()
	select {
	case err := <-aDone:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("a's check never ended")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 1 {
		t.Fatalf("alerts for one change (github silent): %d %v; want 1", len(got), got)
	}
}

// heldSink is an alert sink that records each alert (path and payload) as
// it arrives and holds the requests to path held until release.
type heldSink struct {
	srv     *httptest.Server
	arrived chan string
	release chan struct{}
	once    sync.Once

	mu  sync.Mutex
	got []map[string]any // with "path"
}

func newHeldSink(t *testing.T, held string) *heldSink {
	t.Helper()
	s := &heldSink{arrived: make(chan string, 16), release: make(chan struct{})}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var a map[string]any
		_ = json.NewDecoder(r.Body).Decode(&a)
		a["path"] = r.URL.Path
		s.mu.Lock()
		s.got = append(s.got, a)
		s.mu.Unlock()
		s.arrived <- r.URL.Path
		if r.URL.Path == held {
			<-s.release
		}
	}))
	t.Cleanup(s.srv.Close)
	t.Cleanup(s.unblock) // runs before srv.Close
	return s
}

func (s *heldSink) unblock() { s.once.Do(func() { close(s.release) }) }

func (s *heldSink) alerts() []map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]map[string]any(nil), s.got...)
}

// The event-type watcher's new-type alert, under the same fault as
// TestDeposedLeaderDoesNotAlertTwice (review helper-323, fixed): a leads
// and POSTs "new_event_type" for github push to a sink that holds it, a's
// election connection is cut, b leads and checks, then the sink answers a.
// One alert: b finds the event_types row claimed (locked) and skips it,
// and a records it. Before the fix b posted it too (alerted_at was set
// after the POST).
func TestDeposedLeaderDoesNotAlertNewTypeTwice(t *testing.T) {
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	super, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(super.Close)
	streamer, err := database.Open(ctx, url, database.Options{Role: schema.StreamerRole, MaxConns: 4, AppName: "alert-once"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(streamer.Close)
	exec(t, super, `INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, event_type, raw_body, signature_verified)
		VALUES ('github', 'github', 'delivery-1', 'push', '{}', true)`)
	sink := newHeldSink(t, "/a")
	watcher := func(path string, l *monitor.Leader) *monitor.EventTypes {
		w, err := monitor.NewEventTypes(monitor.EventTypesConfig{
			DB: streamer, AlertURL: sink.srv.URL + path, Metrics: prometheus.NewRegistry(), Leader: l,
			Logger: slog.New(slog.DiscardHandler),
		})
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	la, lb := monitor.NewLeader(streamer.Config().ConnConfig), monitor.NewLeader(streamer.Config().ConnConfig)
	t.Cleanup(la.Close)
	t.Cleanup(lb.Close)
	a, b := watcher("/a", la), watcher("/b", lb)

	aDone := make(chan error, 1)
	go func() { aDone <- a.Check(ctx) }()
	select {
	case p := <-sink.arrived:
		if p != "/a" {
			t.Fatalf("first alert from %s; want a's", p)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("a never posted")
	}
	if _, err := super.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE datname = current_database() AND application_name = $1`, monitor.ElectionAppName); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, 60*time.Second, "b to lead once a's election session ended", func() (bool, string) {
		l, err := lb.Leading(ctx)
		return err == nil && l, fmt.Sprintf("leading %v, %v", l, err)
	})
	if err := b.Check(ctx); err != nil {
		t.Fatal(err)
	}
	sink.unblock()
	select {
	case err := <-aDone:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("a's check never ended")
	}
	if err := b.Check(ctx); err != nil { // after a's record: nothing left to send
		t.Fatal(err)
	}
	got := sink.alerts()
	if len(got) != 1 || got[0]["event_type"] != "push" || got[0]["status"] != "new_event_type" {
		t.Fatalf("alerts for one new type (github push): %d %v; want 1", len(got), got)
	}
	if id, _ := got[0]["alert_id"].(string); len(id) != 32 {
		t.Errorf("alert_id %q: want 32 hex digits", got[0]["alert_id"])
	}
}

// A POST slower than the database's idle_in_transaction_session_timeout
// (an operator's 500 ms, against stuck sessions) does not end the claim
// that holds it: the claim sets its own bound (the POST's timeout and a
// margin), so the alert is recorded once taken and not sent again. With
// the database's setting the session was ended during the POST, the record
// failed and the alert went out again at every check.
func TestSlowAlertOutlivesIdleInTransactionTimeout(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	super, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(super.Close)
	var dbName string
	if err := super.QueryRow(ctx, `SELECT current_database()`).Scan(&dbName); err != nil {
		t.Fatal(err)
	}
	exec(t, super, `ALTER DATABASE `+pgx.Identifier{dbName}.Sanitize()+` SET idle_in_transaction_session_timeout = '500ms'`)
	streamer, err := database.Open(ctx, url, database.Options{Role: schema.StreamerRole, MaxConns: 2, AppName: "alert-once"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(streamer.Close)
	var setting string
	if err := streamer.QueryRow(ctx, `SHOW idle_in_transaction_session_timeout`).Scan(&setting); err != nil || setting != "500ms" {
		t.Fatalf("precondition: the streamer's idle_in_transaction_session_timeout is %q (%v), want 500ms", setting, err)
	}

	var mu sync.Mutex
	var got []string
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var a struct{ Source, Status string }
		_ = json.NewDecoder(r.Body).Decode(&a)
		time.Sleep(1500 * time.Millisecond) // a slow sink, within the alert timeout
		mu.Lock()
		got = append(got, a.Source+" "+a.Status)
		mu.Unlock()
	}))
	t.Cleanup(sink.Close)
	h, err := monitor.NewSilenceDetector(monitor.SilenceConfig{
		DB: streamer, AlertURL: sink.URL, Metrics: prometheus.NewRegistry(),
		MaxSilence: map[string]time.Duration{"github": time.Hour},
		HTTPClient: &http.Client{Timeout: 5 * time.Second},
		Logger:     slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := h.Check(ctx); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 1 {
		t.Fatalf("alerts for one change (github silent), the sink taking 1.5 s: %d %v; want 1", len(got), got)
	}
}

// alert_id is the same on each POST of one change (one sent again after
// the sink failed) and differs between changes, also between two silences
// of a source with the same last_seen (its max_silence raised, then
// lowered again, with no event in between).
func TestSilenceAlertIDNamesTheChange(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	super, streamer := pools(t)
	now := time.Date(2026, 11, 20, 12, 0, 0, 0, time.UTC)
	exec(t, super, `INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, raw_body, signature_verified, received_at)
		VALUES ('github', 'github', 'delivery-1', '{}', true, $1)`, now.Add(-90*time.Minute))
	var mu sync.Mutex
	var ids, statuses []string
	fail := true
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var a struct {
			AlertID string `json:"alert_id"`
			Status  string
		}
		_ = json.NewDecoder(r.Body).Decode(&a)
		mu.Lock()
		defer mu.Unlock()
		ids, statuses = append(ids, a.AlertID), append(statuses, a.Status)
		if fail {
			fail = false
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	t.Cleanup(sink.Close)
	check := func(maxSilence time.Duration) {
		t.Helper()
		h, err := monitor.NewSilenceDetector(monitor.SilenceConfig{
			DB: streamer, AlertURL: sink.URL, Metrics: prometheus.NewRegistry(),
			MaxSilence: map[string]time.Duration{"github": maxSilence},
			Now:        func() time.Time { return now },
			Logger:     slog.New(slog.DiscardHandler),
		})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := h.Check(ctx); err != nil {
			t.Fatal(err)
		}
	}
	check(time.Hour)     // silent: refused (503)
	check(time.Hour)     // silent: sent again, taken
	check(2 * time.Hour) // resumed: the same last_seen, within 2h
	check(time.Hour)     // silent again: the same last_seen
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"silent", "silent", "resumed", "silent"}; !slices.Equal(statuses, want) {
		t.Fatalf("precondition: POSTs %v, want %v", statuses, want)
	}
	for i, id := range ids {
		if len(id) != 32 {
			t.Errorf("POST %d (%s): alert_id %q, want 32 hex digits", i, statuses[i], id)
		}
	}
	if ids[0] != ids[1] {
		t.Errorf("alert_id of one change posted twice (after a 503): %q then %q; want one id", ids[0], ids[1])
	}
	if ids[1] == ids[2] || ids[1] == ids[3] || ids[2] == ids[3] {
		t.Errorf("alert_ids of three changes (silent, resumed, silent again): %q %q %q; want three ids", ids[1], ids[2], ids[3])
	}
}
