package monitor_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/inlet-dev/inlet/internal/testwait"
	"github.com/inlet-dev/inlet/monitor"
)

// Two streamers judge the same sources: each change is logged and POSTed
// once, by the one holding the reporter lock, while both export the gauges.
// When the leader's connection dies (its backend terminated, as when its
// host goes away), the other takes over and reports the next change.
func TestSilenceChangesAreReportedByOneReplica(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	super, streamer := pools(t)

	var mu sync.Mutex
	alerts := map[string][]string{} // replica → "source status"
	now := time.Date(2026, 11, 20, 12, 0, 0, 0, time.UTC)
	type replica struct {
		name   string
		h      *monitor.SilenceDetector
		leader *monitor.Leader
		reg    *prometheus.Registry
		logs   *strings.Builder
		logMu  *sync.Mutex
	}
	var replicas []*replica
	for _, name := range []string{"a", "b"} {
		hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			var a struct{ Source, Status string }
			if err := json.NewDecoder(r.Body).Decode(&a); err != nil {
				t.Errorf("alert body: %v", err)
			}
			mu.Lock()
			alerts[name] = append(alerts[name], a.Source+" "+a.Status)
			mu.Unlock()
		}))
		t.Cleanup(hook.Close)
		r := &replica{name: name, leader: monitor.NewLeader(streamer.Config().ConnConfig), reg: prometheus.NewRegistry(),
			logs: &strings.Builder{}, logMu: &sync.Mutex{}}
		t.Cleanup(r.leader.Close)
		h, err := monitor.NewSilenceDetector(monitor.SilenceConfig{
			DB: streamer, AlertURL: hook.URL, Metrics: r.reg, Leader: r.leader,
			MaxSilence: map[string]time.Duration{"github": time.Hour},
			Now:        func() time.Time { return now },
			Logger:     newLogger(r.logs, r.logMu),
		})
		if err != nil {
			t.Fatal(err)
		}
		r.h = h
		replicas = append(replicas, r)
	}
	checkAll := func() {
		t.Helper()
		for _, r := range replicas {
			if _, err := r.h.Check(ctx); err != nil {
				t.Fatalf("replica %s: %v", r.name, err)
			}
		}
	}
	took := func() map[string][]string {
		mu.Lock()
		defer mu.Unlock()
		out := map[string][]string{}
		for k, v := range alerts {
			out[k] = append([]string(nil), v...)
		}
		return out
	}

	// github never sent and has max_silence 1h: silent, reported once.
	checkAll()
	checkAll() // no change: nothing more
	got := took()
	if len(got) != 1 || len(got["a"]) != 1 || got["a"][0] != "github silent" {
		t.Fatalf("alerts after two rounds: %v, want one \"github silent\" from replica a (the first to check)", got)
	}
	for _, r := range replicas {
		if v := gaugeValue(t, r.reg, "inlet_source_silent", "github"); v != 1 {
			t.Fatalf("replica %s: inlet_source_silent{github} = %v, want 1 on every replica", r.name, v)
		}
	}
	r0, r1 := replicas[0], replicas[1]
	r0.logMu.Lock()
	aLog := r0.logs.String()
	r0.logMu.Unlock()
	r1.logMu.Lock()
	bLog := r1.logs.String()
	r1.logMu.Unlock()
	if strings.Count(aLog, "source silent") != 1 || strings.Contains(bLog, "source silent") {
		t.Fatalf("\"source silent\" lines: a %d, b %d; want 1 and 0", strings.Count(aLog, "source silent"), strings.Count(bLog, "source silent"))
	}

	// The leader's connection dies; the lock goes with it, once the server
	// has ended the session (pg_terminate_backend only signals it: checked
	// at once, b found the lock still held now and then, in a fresh-clone
	// CI).
	exec(t, super, `SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' AND granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`)
	testwait.Eventually(t, 10*time.Second, "the leader's session ended and its lock released", func() (bool, string) {
		var n int
		if err := super.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted
			AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`).Scan(&n); err != nil {
			return false, err.Error()
		}
		return n == 0, fmt.Sprintf("%d advisory locks held", n)
	})
	exec(t, super, `INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, raw_body, signature_verified, received_at)
		VALUES ('github', 'github', 'delivery-1', '{}', true, $1)`, now.Add(-time.Minute))
	// b checks first now, finds the lock free and reports the resume; a,
	// reconnecting, finds it held.
	for _, r := range []*replica{r1, r0} {
		if _, err := r.h.Check(ctx); err != nil {
			t.Fatalf("replica %s: %v", r.name, err)
		}
	}
	got = took()
	if len(got["a"]) != 1 || len(got["b"]) != 1 || got["b"][0] != "github resumed" {
		t.Fatalf("alerts after the leader's connection died: %v, want a: [github silent], b: [github resumed]", got)
	}
	if leading, err := r0.leader.Leading(ctx); err != nil || leading {
		t.Fatalf("former leader: leading %v, %v; want false", leading, err)
	}
	if leading, err := r1.leader.Leading(ctx); err != nil || !leading {
		t.Fatalf("new leader: leading %v, %v; want true", leading, err)
	}

	// Each replica keeps one election connection: a follower tries the lock
	// again on its own, it does not reconnect every check.
	var pids []int
	for range 3 {
		checkAll()
		var ps []int
		rows, err := super.Query(ctx, `SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND application_name = $1 ORDER BY pid`, monitor.ElectionAppName)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var pid int
			_ = rows.Scan(&pid)
			ps = append(ps, pid)
		}
		rows.Close()
		if pids != nil && !slices.Equal(ps, pids) {
			t.Fatalf("election backends changed between checks: %v then %v", pids, ps)
		}
		pids = ps
	}
	if len(pids) != 2 {
		t.Fatalf("%d election backends (%v), want 2 (one per replica)", len(pids), pids)
	}
}
