package backfill

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/inlet-dev/inlet/internal/metrics"
)

// ReconcileMetrics are the Prometheus metrics of reconcile runs. Labels are
// configured source names only.
type ReconcileMetrics struct {
	missingTotal *prometheus.CounterVec
	runsTotal    *prometheus.CounterVec
}

// NewReconcileMetrics registers the reconcile metrics with reg (nil: a
// registry nobody reads).
func NewReconcileMetrics(reg prometheus.Registerer) (*ReconcileMetrics, error) {
	m := &ReconcileMetrics{
		missingTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metrics.Namespace, Subsystem: "reconcile", Name: "missing_total",
			Help: "Events the provider listed that the log did not hold (never delivered, or lost before the commit), by source. Dry runs count too.",
		}, []string{"source"}),
		runsTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metrics.Namespace, Subsystem: "reconcile", Name: "runs_total",
			Help: "Reconcile runs, by source and result (ok or error).",
		}, []string{"source", "result"}),
	}
	reg = metrics.OrDiscard(reg)
	for _, c := range []prometheus.Collector{m.missingTotal, m.runsTotal} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *ReconcileMetrics) missing(source string) {
	if m != nil {
		m.missingTotal.WithLabelValues(source).Inc()
	}
}

func (m *ReconcileMetrics) finished(source string, err error) {
	if m == nil {
		return
	}
	result := "ok"
	if err != nil {
		result = "error"
	}
	m.runsTotal.WithLabelValues(source, result).Inc()
	m.missingTotal.WithLabelValues(source) // the series exists from the first run, at 0
}
