package streamer

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/inlet-dev/inlet/internal/metrics"
)

// registerMetrics exports the streamer's counters (the same as Stats), the
// claim batch sizes and, with the replication wake source, whether its stream
// is up.
func (s *Streamer) registerMetrics(reg prometheus.Registerer) error {
	counter := func(name, help string, v func() int64, labels prometheus.Labels) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{
			Namespace: metrics.Namespace, Subsystem: "streamer", Name: name, Help: help, ConstLabels: labels,
		}, func() float64 { return float64(v()) })
	}
	wake := "Claim rounds woken, by cause: notify (LISTEN), replication (a committed change to jobs) or poll (the fallback tick)."
	s.batchSizes = prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: metrics.Namespace, Subsystem: "streamer", Name: "claim_batch_size",
		Help:    "Jobs leased per claim round, published together: the statements of a main round, or of a round of the handlers claimed apart (0 when nothing was due).",
		Buckets: []float64{0, 1, 2, 5, 10, 25, 50, 100, 250, 500, 1000},
	})
	collectors := []prometheus.Collector{
		s.batchSizes,
		counter("claims_total", "Claim statements run.", s.claims.Load, nil),
		counter("full_claims_total", "Claim statements run over every partition (the others claim jobs of events received within the last hour).", s.fullClaims.Load, nil),
		counter("leased_total", "Jobs leased (an attempt each, unless its lease is given back: a bus that refused its reference, a stop).", s.claimed.Load, nil),
		counter("published_total", "Job references published on the bus.", s.published.Load, nil),
		counter("publish_failures_total", "Job references the bus refused; their leases were given back.", s.publishFailed.Load, nil),
		counter("leases_deferred_total", "Leases of a handler shared by consumer roles given back unpublished, due again later: beyond what the role their job is routed to starts within half a lease.", s.deferred.Load, nil),
		counter("reaped_total", "Expired leases taken back by the reaper and made due again (those dead-lettered are reaped_dead_letters_total, not counted here).", s.reaped.Load, nil),
		counter("reaped_dead_letters_total", "Expired leases that were the job's last attempt: dead-lettered.", s.deadLettered.Load, nil),
		counter("wakeups_total", wake, s.notifyWakeups.Load, prometheus.Labels{"cause": "notify"}),
		counter("wakeups_total", wake, s.replicationWakeups.Load, prometheus.Labels{"cause": "replication"}),
		counter("wakeups_total", wake, s.pollWakeups.Load, prometheus.Labels{"cause": "poll"}),
	}
	if r := s.replication; r != nil {
		collectors = append(collectors,
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Namespace: metrics.Namespace, Subsystem: "streamer", Name: "replication_connected",
				Help:        "1 while the replication wake source's stream is up, 0 while it reconnects (polling covers meanwhile).",
				ConstLabels: prometheus.Labels{"slot": r.Slot()},
			}, func() float64 {
				if up, _ := r.Connected(); up {
					return 1
				}
				return 0
			}),
			counter("replication_reconnects_total", "Replication streams opened after the first; one that keeps rising means streams that keep failing.",
				func() int64 { _, n := r.Connected(); return int64(n) }, prometheus.Labels{"slot": r.Slot()}),
		)
	}
	for _, c := range collectors {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}
