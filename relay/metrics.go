package relay

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/inlet-dev/inlet/ingress/verify"
	"github.com/inlet-dev/inlet/internal/bodyread"
	"github.com/inlet-dev/inlet/internal/metrics"
)

// unknownSource is the source label of requests for any path that is not a
// configured source: the path is the sender's, so it never becomes a label.
const unknownSource = "_unknown"

// Outcomes of a request, the outcome label of inlet_relay_requests_total.
const (
	outcomeRelayed        = "relayed"         // the ingress committed it (or had: a duplicate); 2xx passed on
	outcomeHandshake      = "handshake"       // a GET handshake answered by the relay
	outcomeRejected       = "rejected"        // refused by the relay itself (rejected_total says why)
	outcomeOverloaded     = "overloaded"      // 503 unread: relay.max_inflight_bytes stayed in use
	outcomeUnavailable    = "unavailable"     // 503: the ingress failed or could not be reached
	outcomeIngressRefused = "ingress_refused" // the ingress refused it: passed on (its own data) or 502
)

// relayMetrics are the relay's Prometheus metrics. Labels are configured
// source names and fixed reasons only.
type relayMetrics struct {
	requests *prometheus.CounterVec
	rejected *prometheus.CounterVec
	forward  *prometheus.HistogramVec
}

// requestReasons are the relay's own refusals besides the verifiers'.
var requestReasons = []string{"unknown_source", "method_not_allowed", "body_too_large", "body_read_timeout", "body_unreadable"}

func newRelayMetrics(reg prometheus.Registerer, sources []string, inflight *bodyread.Budget) (*relayMetrics, error) {
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: metrics.Namespace, Subsystem: "relay", Name: name, Help: help}, labels)
	}
	m := &relayMetrics{
		requests: counter("requests_total", "Webhook requests by configured source (_unknown for any other path) and outcome: relayed, handshake, "+
			"rejected (by the relay: rejected_total), overloaded (503 unread, relay.max_inflight_bytes in use), unavailable (503: the ingress "+
			"failed or was not reached), ingress_refused (the ingress refused a verified webhook).", "source", "outcome"),
		rejected: counter("rejected_total", "Requests the relay refused, by source and reason (signature_mismatch, body_too_large, ...).", "source", "reason"),
		forward: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: metrics.Namespace, Subsystem: "relay", Name: "forward_duration_seconds",
			Help:    "Forwarding a verified webhook to the ingress, its answer included (retries too).",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"source"}),
	}
	gauge := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: metrics.Namespace, Subsystem: "relay", Name: name, Help: help}, f)
	}
	inUse := gauge("inflight_bytes", "Body bytes held now by requests being read, verified or forwarded (at most inflight_limit_bytes).",
		func() float64 { return float64(inflight.InUse()) })
	limit := gauge("inflight_limit_bytes", "relay.max_inflight_bytes: the most body bytes held at once; requests past it wait unread.",
		func() float64 { return float64(inflight.Size()) })
	for _, c := range []prometheus.Collector{m.requests, m.rejected, m.forward, inUse, limit} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	// Every configured series exists from the start, at 0.
	reasons := append(append([]string{}, requestReasons...), verify.Reasons()...)
	for _, s := range sources {
		for _, o := range []string{outcomeRelayed, outcomeRejected, outcomeOverloaded, outcomeUnavailable, outcomeIngressRefused} {
			m.requests.WithLabelValues(s, o)
		}
		for _, r := range reasons {
			if r != "unknown_source" {
				m.rejected.WithLabelValues(s, r)
			}
		}
		m.forward.WithLabelValues(s)
	}
	m.requests.WithLabelValues(unknownSource, outcomeRejected)
	m.rejected.WithLabelValues(unknownSource, "unknown_source")
	return m, nil
}
