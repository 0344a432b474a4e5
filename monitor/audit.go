package monitor

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/inlet-dev/inlet/audit"
	"github.com/inlet-dev/inlet/internal/metrics"
)

// Audit is a prometheus.Collector of the newest recorded verification of
// the event log (webhook_ingress.audit_verifications, written by inlet audit
// verify), read on each scrape: inlet_audit_problems, the problems it found
// (0 also when none was recorded), inlet_audit_chain_broken and
// inlet_audit_last_verification_timestamp_seconds (0 when never), so that
// an alert can fire on tampering and on a verification gone stale.
type Audit struct {
	db       Querier
	timeout  time.Duration
	log      *slog.Logger
	problems *prometheus.Desc
	broken   *prometheus.Desc
	last     *prometheus.Desc
	up       *prometheus.Desc
}

// NewAudit returns the collector; register it on the process's registry.
func NewAudit(db Querier, log *slog.Logger) *Audit {
	if log == nil {
		log = slog.Default()
	}
	name := func(n string) string { return prometheus.BuildFQName(metrics.Namespace, "audit", n) }
	return &Audit{
		db: db, timeout: 5 * time.Second, log: log,
		problems: prometheus.NewDesc(name("problems"),
			"Problems (altered, missing or out-of-order events, a broken checkpoint chain) the newest recorded inlet audit verify found; 0 when none was recorded.", nil, nil),
		broken: prometheus.NewDesc(name("chain_broken"),
			"1 when the newest recorded inlet audit verify found the checkpoint chain broken (nothing past the break was checked), else 0.", nil, nil),
		last: prometheus.NewDesc(name("last_verification_timestamp_seconds"),
			"When the newest recorded inlet audit verify ran (Unix seconds); 0 when none was recorded.", nil, nil),
		up: prometheus.NewDesc(name("scrape_ok"),
			"1 when the last scrape could read webhook_ingress.audit_verifications, else 0.", nil, nil),
	}
}

// Describe sends the descriptors (prometheus.Collector).
func (a *Audit) Describe(ch chan<- *prometheus.Desc) {
	ch <- a.problems
	ch <- a.broken
	ch <- a.last
	ch <- a.up
}

// Collect reads the newest verification and sends the gauges
// (prometheus.Collector); only scrape_ok, at 0, when the read failed.
func (a *Audit) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), a.timeout)
	defer cancel()
	v, ok, err := audit.LastVerification(ctx, a.db)
	if err != nil {
		a.log.Warn("audit metrics: read the last verification", slog.String("error", err.Error()))
		ch <- prometheus.MustNewConstMetric(a.up, prometheus.GaugeValue, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(a.up, prometheus.GaugeValue, 1)
	var last, broken float64
	if ok {
		last = float64(v.VerifiedAt.UnixMilli()) / 1000
		if v.Report.ChainBroken {
			broken = 1
		}
	}
	ch <- prometheus.MustNewConstMetric(a.problems, prometheus.GaugeValue, float64(v.Report.ProblemsFound))
	ch <- prometheus.MustNewConstMetric(a.broken, prometheus.GaugeValue, broken)
	ch <- prometheus.MustNewConstMetric(a.last, prometheus.GaugeValue, last)
}
