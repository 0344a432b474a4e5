package consumers

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/inlet-dev/inlet/internal/metrics"
)

// Outcomes of an attempt as counted; "lost" is an attempt whose lease was
// gone when it reported (its outcome was not recorded).
var attemptOutcomes = []string{"completed", "failed", "dead_letter", "lost", "record_error"}

type consumerMetrics struct {
	attempts *prometheus.CounterVec
	failures *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

func newConsumerMetrics(reg prometheus.Registerer, handlers []Handler) (*consumerMetrics, error) {
	m := &consumerMetrics{
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metrics.Namespace, Subsystem: "consumer", Name: "attempts_total",
			Help: "Finished attempts, by handler and outcome (completed, failed, dead_letter; lost: the lease was gone; record_error: the outcome could not be written).",
		}, []string{"handler", "outcome"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metrics.Namespace, Subsystem: "consumer", Name: "failures_total",
			Help: "Failed attempts, by handler and error class (the fixed list of consumers.Classes).",
		}, []string{"handler", "error_class"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: metrics.Namespace, Subsystem: "consumer", Name: "attempt_duration_seconds",
			Help:    "From taking an attempt to recording its outcome.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
		}, []string{"handler"}),
	}
	for _, c := range []prometheus.Collector{m.attempts, m.failures, m.duration} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	for _, h := range handlers {
		for _, o := range attemptOutcomes {
			m.attempts.WithLabelValues(h.Name, o)
		}
		for _, c := range classes {
			m.failures.WithLabelValues(h.Name, string(c))
		}
	}
	return m, nil
}

func (m *consumerMetrics) finished(handler, outcome string, class ErrorClass, took time.Duration) {
	m.attempts.WithLabelValues(handler, outcome).Inc()
	if class != "" && outcome != "completed" {
		m.failures.WithLabelValues(handler, string(class)).Inc()
	}
	m.duration.WithLabelValues(handler).Observe(took.Seconds())
}
