package ingress_test

import (
	"bytes"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// After a scripted sequence — two stored, one duplicate, three rejected for
// three reasons, one for an unknown source — the counters say exactly that,
// the latency histogram counted the three accepted requests, and no label
// carries an event id or a path the sender chose.
func TestMetricsAfterAScriptedSequence(t *testing.T) {
	t.Parallel()
	b := setup(t)
	send := func(req *http.Request, want int) {
		t.Helper()
		if code, answer, _ := do(t, req); code != want {
			t.Fatalf("%s: %d %s, want %d", req.URL.Path, code, answer, want)
		}
	}
	now := time.Now()
	send(stripeRequest(t, b.url, []byte(`{"id":"evt_m1","type":"invoice.paid"}`), now), 200)
	send(stripeRequest(t, b.url, []byte(`{"id":"evt_m2","type":"invoice.paid"}`), now), 200)
	send(stripeRequest(t, b.url, []byte(`{"id":"evt_m1","type":"invoice.paid"}`), now), 200) // duplicate
	bad := stripeRequest(t, b.url, []byte(`{"id":"evt_m3","type":"x"}`), now)
	bad.Header.Set("Stripe-Signature", fmt.Sprintf("t=%d,v1=%s", now.Unix(), strings.Repeat("ab", 32)))
	send(bad, 401)
	send(stripeRequest(t, b.url, []byte(`{"id":"evt_m4","type":"x"}`), now.Add(-time.Hour)), 401)
	send(stripeRequest(t, b.url, bytes.Repeat([]byte("a"), 2<<10), now), 413)
	unknown, _ := http.NewRequest(http.MethodPost, b.url+"/webhooks/evt_m5-as-a-path", strings.NewReader("{}"))
	send(unknown, 404)

	want := `
# HELP inlet_ingress_duplicates_total Webhooks verified whose (source, event id) was already stored: answered 200, nothing written.
# TYPE inlet_ingress_duplicates_total counter
inlet_ingress_duplicates_total{source="github"} 0
inlet_ingress_duplicates_total{source="gitlab"} 0
inlet_ingress_duplicates_total{source="slack"} 0
inlet_ingress_duplicates_total{source="stripe"} 1
# HELP inlet_ingress_requests_total Webhook requests received, by configured source (_unknown for any other path).
# TYPE inlet_ingress_requests_total counter
inlet_ingress_requests_total{source="_unknown"} 1
inlet_ingress_requests_total{source="github"} 0
inlet_ingress_requests_total{source="gitlab"} 0
inlet_ingress_requests_total{source="slack"} 0
inlet_ingress_requests_total{source="stripe"} 6
# HELP inlet_ingress_stored_total Webhooks verified and committed as new events.
# TYPE inlet_ingress_stored_total counter
inlet_ingress_stored_total{source="github"} 0
inlet_ingress_stored_total{source="gitlab"} 0
inlet_ingress_stored_total{source="slack"} 0
inlet_ingress_stored_total{source="stripe"} 2
`
	if err := testutil.GatherAndCompare(b.reg, strings.NewReader(want),
		"inlet_ingress_requests_total", "inlet_ingress_stored_total", "inlet_ingress_duplicates_total"); err != nil {
		t.Fatal(err)
	}
	mfs, err := b.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	rejected := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
				if strings.Contains(l.GetValue(), "evt_") {
					t.Errorf("%s has a label value %q from a request", mf.GetName(), l.GetValue())
				}
			}
			switch mf.GetName() {
			case "inlet_ingress_rejected_total":
				if v := m.GetCounter().GetValue(); v > 0 {
					rejected[labels["source"]+"/"+labels["reason"]] = v
				}
			case "inlet_ingress_ingest_duration_seconds":
				if n := m.GetHistogram().GetSampleCount(); labels["source"] == "stripe" && n != 3 {
					t.Errorf("ingest duration of stripe counted %d requests, want 3", n)
				}
			}
		}
	}
	wantRejected := map[string]float64{
		"stripe/signature_mismatch": 1, "stripe/timestamp_outside_tolerance": 1,
		"stripe/body_too_large": 1, "_unknown/unknown_source": 1,
	}
	if len(rejected) != len(wantRejected) {
		t.Fatalf("rejected = %v, want %v", rejected, wantRejected)
	}
	for k, v := range wantRejected {
		if rejected[k] != v {
			t.Fatalf("rejected = %v, want %v", rejected, wantRejected)
		}
	}
}
