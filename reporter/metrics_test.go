package reporter_test

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/inlet-dev/inlet/reporter"
)

// A reporter that cannot get through shows it in its metrics: failures by
// step, and the time of its last success standing still; records the control
// plane acknowledged are counted. It had no metrics, only log lines.
func TestReporterMetricsShowAControlPlaneDown(t *testing.T) {
	t.Parallel()
	d, cp := newDataPlane(t), newControlPlane(t)
	reg := prometheus.NewRegistry()
	cp.down.Store(true)
	for range 4 {
		d.complete(t, d.super, d.job(t), 1)
	}
	startReporter(t, d, cp, func(c *reporter.Config) { c.Metrics = reg })
	cp.waitRequests(t, "two requests dropped while down", &cp.refused, 0, 2)
	// The control plane counts a request it drops before the reporter sees
	// the dropped connection and counts its failure: wait for the count.
	deadline := time.Now().Add(10 * time.Second)
	for n := metricValue(t, reg, "inlet_reporter_failures_total", "fetch_cursor"); n < 2; n = metricValue(t, reg, "inlet_reporter_failures_total", "fetch_cursor") {
		if time.Now().After(deadline) {
			t.Fatalf("failures_total{step=fetch_cursor} = %v while the control plane dropped every request, want >= 2", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n := metricValue(t, reg, "inlet_reporter_failures_total", "send") + metricValue(t, reg, "inlet_reporter_failures_total", "read"); n != 0 {
		t.Errorf("failures of read and send before any cursor: %v", n)
	}
	if last := metricValue(t, reg, "inlet_reporter_last_success_timestamp_seconds", ""); last != 0 {
		t.Errorf("last_success_timestamp_seconds %v before anything succeeded", last)
	}

	cp.down.Store(false)
	cp.waitStored(t, 4)
	deadline = time.Now().Add(10 * time.Second)
	for metricValue(t, reg, "inlet_reporter_records_sent_total", "") < 4 {
		if time.Now().After(deadline) {
			t.Fatalf("records_sent_total %v after 4 were stored", metricValue(t, reg, "inlet_reporter_records_sent_total", ""))
		}
		time.Sleep(20 * time.Millisecond)
	}
	last := metricValue(t, reg, "inlet_reporter_last_success_timestamp_seconds", "")
	if age := time.Since(time.Unix(int64(last), 0)); age < -time.Second || age > 10*time.Second {
		t.Errorf("last_success_timestamp_seconds %v is %s old, want now", last, age)
	}
}

// metricValue is the value of name in reg, of its series whose one label's
// value is label ("" for a metric without labels).
func metricValue(t *testing.T, reg *prometheus.Registry, name, label string) float64 {
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
			if ls := m.GetLabel(); (label == "" && len(ls) == 0) || (len(ls) == 1 && ls[0].GetValue() == label) {
				return m.GetCounter().GetValue() + m.GetGauge().GetValue()
			}
		}
	}
	t.Fatalf("no %s{%s}", name, label)
	return 0
}
