package tests

import (
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/internal/pgtest"
	"github.com/inlet-dev/inlet/internal/testwait"
)

// TestEveryExportedMetricIsDocumented scrapes the real /metrics of
// `inlet dev` (ingress, streamer, consumer and monitors in one process) and
// compares it with the metric reference of docs/operations.md ("Watching
// it": "Every service serves Prometheus GET /metrics" + the metric table),
// the reference an operator builds alerts and dashboards from.
//
// Defect: eight metric families the services export are documented nowhere
// in docs/ or README.md, several of them ones an operator needs:
//   - inlet_ingress_overloaded_total{source}: the 503 `overloaded` answers
//     (ingress.max_inflight_bytes full for store_timeout) are counted ONLY
//     here (ingress/server.go read(), readOverloaded case), not in the
//     documented inlet_ingress_unavailable_total ("answered 503 because the
//     database failed") nor in inlet_ingress_rejected_total. An operator
//     alerting on the documented counters never sees ingress shedding load,
//     although docs/operations.md "Capacity and overload" names exactly this
//     503 as one of the three.
//   - inlet_audit_scrape_ok and inlet_queue_scrape_ok: when the read fails,
//     monitor/audit.go Collect (and monitor/queue.go) send ONLY scrape_ok=0 and
//     drop inlet_audit_problems / inlet_audit_last_verification_timestamp_seconds
//     (resp. inlet_jobs / inlet_handler_lag_seconds). The documented alerts
//     ("alert on problems > 0, and on a verification older than your cron
//     interval") then silently stop evaluating; the only signal is a metric
//     the docs never mention.
//   - inlet_events_types_seen_total{source,type}, inlet_streamer_publish_failures_total,
//     inlet_streamer_reaped_dead_letters_total, inlet_ingress_inflight_bytes,
//     inlet_ingress_inflight_limit_bytes.
//
// Expected: every exported inlet_* metric appears in the docs (the table of
// docs/operations.md), with its labels; every documented one is exported.
func TestEveryExportedMetricIsDocumented(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t)
	addr, metricsAddr, adminAddr := freeAddr(t), freeAddr(t), freeAddr(t)
	env := cleanEnv("DATABASE_URL="+url, "INLET_METRICS_LISTEN="+metricsAddr, "INLET_ADMIN_LISTEN="+adminAddr)
	p := start(t, env, "dev", "--listen", addr)
	p.waitOutput("Ctrl-C stops.", 3*time.Minute)
	if out, errOut, code := runInlet(t, env, "send", "stripe", "--url", "http://"+addr); code != 0 {
		t.Fatalf("inlet send stripe: exit %d\n%s%s", code, out, errOut)
	}
	// The job done, the silence detector's first check after the event (10 s
	// apart in inlet dev) and the event-type fold past, so every series inlet dev exports is on
	// the page (the job may be done before the fold ran).
	var page string
	testwait.Eventually(t, 60*time.Second, "/metrics with the job completed, the source gauges and the event types", func() (bool, string) {
		page = httpGet(t, "http://"+metricsAddr+"/metrics")
		return strings.Contains(page, `inlet_consumer_attempts_total{handler="log",outcome="completed"} 1`) &&
			strings.Contains(page, `inlet_source_silent{source="stripe"}`) &&
			// Set by a check that saw the event: one that ran before it was
			// stored sets inlet_source_silent only (the next is 10 s on).
			strings.Contains(page, `inlet_source_last_event_timestamp_seconds{source="stripe"}`) &&
			strings.Contains(page, `inlet_events_types_seen_total{`), page
	})

	// exported: metric family → its label names (histogram suffixes folded).
	exported := map[string][]string{}
	series := regexp.MustCompile(`^(inlet_[a-z_]+?)(_bucket|_sum|_count)?(\{([^}]*)\})? `)
	for _, l := range strings.Split(page, "\n") {
		m := series.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		name := m[1]
		if m[2] != "" && !strings.Contains(page, "# TYPE "+name+" histogram") {
			name += m[2]
		}
		labels := exported[name]
		for _, kv := range strings.Split(m[4], ",") {
			if k, _, ok := strings.Cut(kv, "="); ok && k != "le" && !slices.Contains(labels, k) {
				labels = append(labels, k)
			}
		}
		exported[name] = labels
	}

	var docs string
	for _, f := range []string{"../README.md", "../docs/operations.md", "../docs/pipeline.md", "../docs/providers.md", "../docs/database.md", "../docs/configuration.md"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		docs += string(b)
	}
	// documented: every `inlet_…` / `inlet_…{a,b}` in the docs' code spans.
	documented := map[string][]string{}
	for _, m := range regexp.MustCompile("`(inlet_[a-z_]+)(\\{([a-z_,]+)[^}]*\\})?").FindAllStringSubmatch(docs, -1) {
		if m[3] != "" {
			for _, k := range strings.Split(m[3], ",") {
				if k = strings.TrimSpace(k); !slices.Contains(documented[m[1]], k) {
					documented[m[1]] = append(documented[m[1]], k)
				}
			}
		} else if _, ok := documented[m[1]]; !ok {
			documented[m[1]] = nil
		}
	}

	var undocumented []string
	for name, labels := range exported {
		dl, ok := documented[name]
		if !ok {
			undocumented = append(undocumented, name+"{"+strings.Join(labels, ",")+"}")
			continue
		}
		for _, k := range dl {
			if !slices.Contains(labels, k) {
				t.Errorf("docs give %s the label %q; /metrics has %v", name, k, labels)
			}
		}
	}
	sort.Strings(undocumented)
	for _, u := range undocumented {
		t.Errorf("inlet dev exports %s, which no page of docs/ (nor README.md) documents", u)
	}
	// The other way: the metric table's rows are all exported (the scheduled
	// reconcile's only when reconcile.enabled, and the reporter's only when
	// reporter.url is set, which inlet dev's defaults are not; inlet relay's
	// by inlet relay, whose metrics relay's TestRelayMetrics reads; the
	// replication wake source's only with streamer.wake: replication, whose
	// streamer TestReplicationConnectedMetric reads).
	_, table, _ := strings.Cut(docs, "| metric | what |")
	table, _, _ = strings.Cut(table, "**Silent providers.**")
	for _, m := range regexp.MustCompile("`(inlet_[a-z_]+)").FindAllStringSubmatch(table, -1) {
		if _, ok := exported[m[1]]; !ok && !strings.HasPrefix(m[1], "inlet_reconcile_") &&
			!strings.HasPrefix(m[1], "inlet_reporter_") && !strings.HasPrefix(m[1], "inlet_relay_") &&
			!strings.HasPrefix(m[1], "inlet_streamer_replication_") {
			t.Errorf("docs/operations.md documents %s; /metrics of inlet dev has no such metric", m[1])
		}
	}
}
