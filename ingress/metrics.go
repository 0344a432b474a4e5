package ingress

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/inlet-dev/inlet/ingress/verify"
	"github.com/inlet-dev/inlet/internal/bodyread"
	"github.com/inlet-dev/inlet/internal/metrics"
)

// unknownSource is the source label of requests for a source that is not
// configured: the path segment is the sender's, and must not become a label.
const unknownSource = "_unknown"

// Reasons a request is rejected before verification (verify.Reasons are the rest).
var requestReasons = append([]string{"unknown_source", "method_not_allowed", "body_too_large", "body_unreadable", "body_read_timeout", "event_unstorable"}, limitReasons...)

type ingressMetrics struct {
	received    *prometheus.CounterVec
	stored      *prometheus.CounterVec
	duplicates  *prometheus.CounterVec
	rejected    *prometheus.CounterVec
	unavailable *prometheus.CounterVec
	// outcomeUnknown counts the 503s after which the event may be stored.
	outcomeUnknown *prometheus.CounterVec
	overloaded     *prometheus.CounterVec
	// handshakes counts the providers' endpoint checks answered (not stored).
	handshakes *prometheus.CounterVec
	duration   *prometheus.HistogramVec
	// deliveryLag is received − occurred of each stored event that has an
	// occurred_at: how late the provider delivers (retries, backlogs).
	deliveryLag *prometheus.HistogramVec
}

func newIngressMetrics(reg prometheus.Registerer, sources []string, inflight *bodyread.Budget) (*ingressMetrics, error) {
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: metrics.Namespace, Subsystem: "ingress", Name: name, Help: help}, labels)
	}
	m := &ingressMetrics{
		received:    counter("requests_total", "Webhook requests received, by configured source (_unknown for any other path).", "source"),
		stored:      counter("stored_total", "Webhooks verified and committed as new events.", "source"),
		duplicates:  counter("duplicates_total", "Webhooks verified whose (source, event id) was already stored: answered 200, nothing written.", "source"),
		rejected:    counter("rejected_total", "Webhooks refused, by reason (signature_mismatch, timestamp_outside_tolerance, body_too_large, ...).", "source", "reason"),
		unavailable: counter("unavailable_total", "Verified webhooks answered 503 because the database failed: not stored, or outcome unknown.", "source"),
		outcomeUnknown: counter("outcome_unknown_total", "Verified webhooks answered 503 whose write was sent but not answered (store timeout, connection "+
			"lost): the event may be stored, and the provider's retry is then answered duplicate. Included in unavailable_total.", "source"),
		overloaded: counter("overloaded_total", "Webhooks answered 503 overloaded, nothing stored, for want of memory: ingress.max_inflight_bytes stayed in use for "+
			"ingress.store_timeout (the database is not keeping up with the bodies arriving), too many requests were waiting for it already, "+
			"or the room to parse bodies for subscription filters stayed in use for ingress.store_timeout.", "source"),
		handshakes: counter("handshakes_total", "Provider endpoint checks answered (Slack url_verification and ssl_check, Meta subscribe, X crc, Zoom url_validation, "+
			"Twitch callback_verification, Discord ping, ...), by source and kind. Not events: nothing is stored. A refused one counts in rejected_total.", "source", "kind"),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: metrics.Namespace, Subsystem: "ingress", Name: "ingest_duration_seconds",
			Help:    "From the start of a request to the commit of its event (stored and duplicates).",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}, []string{"source"}),
		deliveryLag: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: metrics.Namespace, Subsystem: "ingress", Name: "delivery_lag_seconds",
			Help: "Provider delivery lag of stored events: received_at − occurred_at (the provider's own event time; " +
				"events without one are not observed; a sender's clock ahead of ours counts as 0). Retries and provider backlogs show here.",
			Buckets: []float64{1, 5, 15, 60, 300, 900, 3600, 4 * 3600, 24 * 3600, 3 * 24 * 3600},
		}, []string{"source"}),
	}
	gauge := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: metrics.Namespace, Subsystem: "ingress", Name: name, Help: help}, f)
	}
	inUse := gauge("inflight_bytes", "Bytes reserved now by requests being read, verified or stored: their bodies and headers (at most inflight_limit_bytes).",
		func() float64 { return float64(inflight.InUse()) })
	limit := gauge("inflight_limit_bytes", "ingress.max_inflight_bytes: the most body bytes held at once; requests past it wait unread.",
		func() float64 { return float64(inflight.Size()) })
	for _, c := range []prometheus.Collector{m.received, m.stored, m.duplicates, m.rejected, m.unavailable, m.outcomeUnknown, m.overloaded, m.handshakes, m.duration, m.deliveryLag, inUse, limit} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	// Every configured series exists from the start, at 0.
	reasons := append(append(append([]string{}, requestReasons...), relayReasons...), verify.Reasons()...)
	for _, s := range sources {
		m.received.WithLabelValues(s)
		m.stored.WithLabelValues(s)
		m.duplicates.WithLabelValues(s)
		m.unavailable.WithLabelValues(s)
		m.outcomeUnknown.WithLabelValues(s)
		m.overloaded.WithLabelValues(s)
		m.deliveryLag.WithLabelValues(s)
		for _, r := range reasons {
			if r != "unknown_source" {
				m.rejected.WithLabelValues(s, r)
			}
		}
	}
	m.rejected.WithLabelValues(unknownSource, "unknown_source")
	return m, nil
}

func (m *ingressMetrics) accepted(source string, duplicate bool, start time.Time) {
	if duplicate {
		m.duplicates.WithLabelValues(source).Inc()
	} else {
		m.stored.WithLabelValues(source).Inc()
	}
	m.duration.WithLabelValues(source).Observe(time.Since(start).Seconds())
}

// lag observes a stored event's delivery lag; a zero occurred (none given) is
// not observed.
func (m *ingressMetrics) lag(source string, occurred, received time.Time) {
	if occurred.IsZero() {
		return
	}
	m.deliveryLag.WithLabelValues(source).Observe(max(received.Sub(occurred), 0).Seconds())
}
