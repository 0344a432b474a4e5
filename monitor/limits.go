package monitor

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/inlet-dev/inlet/internal/metrics"
	"github.com/inlet-dev/inlet/schema/queries"
)

// circuits are the states of a handler's circuit breaker
// (webhook_ingress.handler_limits.circuit).
var circuits = []string{"closed", "open", "half_open"}

// Limits is a prometheus.Collector of the handlers' limits and circuit
// breakers (webhook_ingress.handler_limits), read on each scrape:
// inlet_handler_circuit{handler,state} is 1 for the circuit's state and 0
// for the others, inlet_handler_consecutive_failures{handler} the failures
// counted towards opening it, inlet_handler_rate_limit{handler} and
// inlet_handler_max_in_flight{handler} the settings (0: none).
type Limits struct {
	db       Querier
	timeout  time.Duration
	log      *slog.Logger
	circuit  *prometheus.Desc
	failures *prometheus.Desc
	rate     *prometheus.Desc
	inFlight *prometheus.Desc
}

// NewLimits returns the collector; register it on the process's registry.
func NewLimits(db Querier, log *slog.Logger) *Limits {
	if log == nil {
		log = slog.Default()
	}
	name := func(n string) string { return prometheus.BuildFQName(metrics.Namespace, "handler", n) }
	return &Limits{
		db: db, timeout: 5 * time.Second, log: log,
		circuit: prometheus.NewDesc(name("circuit"),
			"1 for the state of the handler's circuit breaker (closed, open: its jobs wait; half_open: a probe runs), 0 for the others.", []string{"handler", "state"}, nil),
		failures: prometheus.NewDesc(name("consecutive_failures"),
			"Consecutive failed attempts of the handler counted towards opening its circuit.", []string{"handler"}, nil),
		rate: prometheus.NewDesc(name("rate_limit"),
			"The handler's rate limit in job starts per second across every replica; 0: none.", []string{"handler"}, nil),
		inFlight: prometheus.NewDesc(name("max_in_flight"),
			"The handler's cap on jobs leased at once across every replica; 0: none.", []string{"handler"}, nil),
	}
}

// Describe sends the descriptors (prometheus.Collector).
func (l *Limits) Describe(ch chan<- *prometheus.Desc) {
	ch <- l.circuit
	ch <- l.failures
	ch <- l.rate
	ch <- l.inFlight
}

// Collect reads every limited handler and sends its gauges
// (prometheus.Collector); nothing when the read failed (logged).
func (l *Limits) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), l.timeout)
	defer cancel()
	rows, err := queries.New(l.db).HandlerLimitsState(ctx)
	if err != nil {
		l.log.Warn("handler limit metrics: read handler_limits", slog.String("error", err.Error()))
		return
	}
	for _, r := range rows {
		for _, c := range circuits {
			v := 0.0
			if r.Circuit == c {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(l.circuit, prometheus.GaugeValue, v, r.Handler, c)
		}
		ch <- prometheus.MustNewConstMetric(l.failures, prometheus.GaugeValue, float64(r.ConsecutiveFailures), r.Handler)
		var rate, inFlight float64
		if r.RatePerSecond != nil {
			rate = *r.RatePerSecond
		}
		if r.MaxInFlight != nil {
			inFlight = float64(*r.MaxInFlight)
		}
		ch <- prometheus.MustNewConstMetric(l.rate, prometheus.GaugeValue, rate, r.Handler)
		ch <- prometheus.MustNewConstMetric(l.inFlight, prometheus.GaugeValue, inFlight, r.Handler)
	}
}
