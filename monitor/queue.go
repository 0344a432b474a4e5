// Package monitor watches the queue and the providers from the database:
// a Prometheus collector of open jobs and lag per handler, one of the newest
// recorded audit verification (Audit), and the silent-source detector
// (SilenceDetector). Both read as webhook_streamer, through
// indexes that exclude finished jobs, so their cost does not grow with the log.
package monitor

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/inlet-dev/inlet/internal/metrics"
	"github.com/inlet-dev/inlet/schema/queries"
)

// Querier is what monitor reads through: a pool (or a connection).
type Querier interface {
	queries.DBTX
}

// Queue is a prometheus.Collector of the jobs table, read on each scrape:
// inlet_jobs{handler,state} for pending, leased, failed and dead_letter, and
// inlet_handler_lag_seconds{handler}, the age of the oldest due job.
type Queue struct {
	db      Querier
	timeout time.Duration
	log     *slog.Logger
	jobs    *prometheus.Desc
	lag     *prometheus.Desc
	up      *prometheus.Desc
}

// NewQueue returns the collector; register it on the process's registry.
func NewQueue(db Querier, log *slog.Logger) *Queue {
	if log == nil {
		log = slog.Default()
	}
	return &Queue{
		db: db, timeout: 5 * time.Second, log: log,
		jobs: prometheus.NewDesc(prometheus.BuildFQName(metrics.Namespace, "", "jobs"),
			"Jobs not completed, by handler and state (pending, leased, failed, dead_letter).", []string{"handler", "state"}, nil),
		lag: prometheus.NewDesc(prometheus.BuildFQName(metrics.Namespace, "", "handler_lag_seconds"),
			"Age of the handler's oldest due job (pending, or failed past its backoff); 0 when none is due.", []string{"handler"}, nil),
		up: prometheus.NewDesc(prometheus.BuildFQName(metrics.Namespace, "", "queue_scrape_ok"),
			"1 when the last scrape could read the jobs table, else 0.", nil, nil),
	}
}

// Describe sends the descriptors of the queue's gauges (prometheus.Collector).
func (q *Queue) Describe(ch chan<- *prometheus.Desc) {
	ch <- q.jobs
	ch <- q.lag
	ch <- q.up
}

var queueStates = []string{"pending", "leased", "failed", "dead_letter"}

// Collect reads the jobs table and sends the queue's gauges
// (prometheus.Collector); up is 0 when the read failed.
func (q *Queue) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), q.timeout)
	defer cancel()
	counts, lags, err := q.read(ctx)
	if err != nil {
		q.log.Warn("queue metrics: read jobs", slog.String("error", err.Error()))
		ch <- prometheus.MustNewConstMetric(q.up, prometheus.GaugeValue, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(q.up, prometheus.GaugeValue, 1)
	for h, byState := range counts {
		for _, s := range queueStates {
			ch <- prometheus.MustNewConstMetric(q.jobs, prometheus.GaugeValue, float64(byState[s]), h, s)
		}
		ch <- prometheus.MustNewConstMetric(q.lag, prometheus.GaugeValue, lags[h], h)
	}
}

func (q *Queue) read(ctx context.Context) (map[string]map[string]int64, map[string]float64, error) {
	counts := map[string]map[string]int64{}
	db := queries.New(q.db)
	jobs, err := db.MonitorJobs(ctx)
	if err != nil {
		return nil, nil, err
	}
	for _, r := range jobs {
		if counts[r.Handler] == nil {
			counts[r.Handler] = map[string]int64{}
		}
		counts[r.Handler][r.Status] += r.Jobs
	}
	lags := map[string]float64{}
	lagRows, err := db.MonitorLag(ctx)
	if err != nil {
		return nil, nil, err
	}
	for _, r := range lagRows {
		lags[r.Handler] = max(r.LagSeconds, 0)
		if counts[r.Handler] == nil {
			counts[r.Handler] = map[string]int64{}
		}
	}
	return counts, lags, nil
}
