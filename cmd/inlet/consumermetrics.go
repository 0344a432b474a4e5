package main

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/inlet-dev/inlet/consumers"
	"github.com/inlet-dev/inlet/internal/metrics"
)

// consumerMetrics exports a consumer service's attempts to Prometheus: the
// consumer SDK counts through its small consumers.Metrics interface and
// imports no metrics library. It lives with the program that wires the SDK to
// Prometheus (internal/ sits below the SDK and imports no service).
type consumerMetrics struct {
	attempts *prometheus.CounterVec
	failures *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

// consumerMetricsOn registers inlet_consumer_attempts_total,
// inlet_consumer_failures_total and inlet_consumer_attempt_duration_seconds
// on reg (nil: a registry nobody reads), with every series of handlers'
// outcomes and error classes at zero, and returns the consumers.Metrics that
// counts into them.
func consumerMetricsOn(reg prometheus.Registerer, handlers []string) (consumers.Metrics, error) {
	m := &consumerMetrics{
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metrics.Namespace, Subsystem: "consumer", Name: "attempts_total",
			Help: "Finished attempts, by handler and outcome (completed, failed, dead_letter; lost: the lease was gone; record_error: the outcome could not be written; given_back: not run, its lease given back uncounted).",
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
	reg = metrics.OrDiscard(reg)
	for _, c := range []prometheus.Collector{m.attempts, m.failures, m.duration} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	for _, h := range handlers {
		for _, o := range consumers.Outcomes() {
			m.attempts.WithLabelValues(h, o)
		}
		for _, c := range consumers.Classes() {
			m.failures.WithLabelValues(h, string(c))
		}
	}
	return m, nil
}

func (m *consumerMetrics) AttemptFinished(handler, outcome string, class consumers.ErrorClass, took time.Duration) {
	m.attempts.WithLabelValues(handler, outcome).Inc()
	if class != "" && outcome != "completed" && outcome != "given_back" { // a given-back attempt did not run: no failure
		m.failures.WithLabelValues(handler, string(class)).Inc()
	}
	m.duration.WithLabelValues(handler).Observe(took.Seconds())
}
