package relay_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The relay counts its requests by source and outcome, its refusals by
// reason, and the bodies it holds; an unknown path is one label, never the
// sender's. (It had no metrics: an operator saw the relay only in its log.)
func TestRelayMetrics(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	b := setup(t, options{metrics: reg})
	if code, body, _ := do(t, stripeRequest(t, b.relayURL, []byte(`{"id":"evt_metrics_1","type":"invoice.paid"}`), time.Now())); code != http.StatusOK {
		t.Fatalf("relayed: %d %s", code, body)
	}
	// Signed for another body.
	bad := stripeRequest(t, b.relayURL, []byte(`{"id":"evt_metrics_2","type":"invoice.paid"}`), time.Now())
	bad.Header.Set("Stripe-Signature", stripeRequest(t, b.relayURL, []byte(`{"id":"evt_other"}`), time.Now()).Header.Get("Stripe-Signature"))
	if code, _, _ := do(t, bad); code != http.StatusUnauthorized {
		t.Fatalf("a signature of another body: %d", code)
	}
	req, err := http.NewRequest(http.MethodPost, b.relayURL+"/webhooks/no-such-source-a1b2c3", nil)
	if err != nil {
		t.Fatal(err)
	}
	if code, _, _ := do(t, req); code != http.StatusNotFound {
		t.Fatalf("an unknown source: %d", code)
	}

	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{} // name,label values in label name order
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			key := mf.GetName()
			for _, l := range m.GetLabel() {
				key += "," + l.GetValue()
				if strings.Contains(l.GetValue(), "no-such-source") {
					t.Errorf("%s has a label holding the sender's path: %s", mf.GetName(), l.GetValue())
				}
			}
			got[key] = m.GetCounter().GetValue() + m.GetGauge().GetValue() + float64(m.GetHistogram().GetSampleCount())
		}
	}
	for key, want := range map[string]float64{
		"inlet_relay_requests_total,relayed,stripe":            1,
		"inlet_relay_requests_total,rejected,stripe":           1,
		"inlet_relay_requests_total,rejected,_unknown":         1,
		"inlet_relay_requests_total,unavailable,stripe":        0,
		"inlet_relay_rejected_total,signature_mismatch,stripe": 1,
		"inlet_relay_rejected_total,unknown_source,_unknown":   1,
		"inlet_relay_forward_duration_seconds,stripe":          1,
		"inlet_relay_inflight_limit_bytes":                     32 << 20,
		"inlet_relay_inflight_bytes":                           0,
	} {
		if v, ok := got[key]; !ok || v != want {
			t.Errorf("%s = %v (present %v), want %v", key, v, ok, want)
		}
	}
}
