package main

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/inlet-dev/inlet/admin"
	"github.com/inlet-dev/inlet/dashboard"
	"github.com/inlet-dev/inlet/inletyaml"
	"github.com/inlet-dev/inlet/internal/health"
	"github.com/inlet-dev/inlet/internal/loop"
	"github.com/inlet-dev/inlet/internal/metrics"
	"github.com/inlet-dev/inlet/internal/tracing"
	"github.com/inlet-dev/inlet/monitor"
)

// startMonitors runs the silent-source detector of cfg over pool (the
// streamer's: it reads event metadata only), and the event-type watcher
// (event_types, inlet_events_unrouted_total, new-type alerts), until ctx is
// done or stop is called. The detector is nil when silence.disabled; the
// event-type watcher runs regardless: no event type goes unseen.
func startMonitors(ctx context.Context, cfg inletyaml.Config, pool *pgxpool.Pool, reg prometheus.Registerer, log *slog.Logger) (*monitor.SilenceDetector, func(), error) {
	hc := cfg.Silence
	// Of several streamers on the database, one reports each change.
	leader := monitor.NewLeader(pool.Config().ConnConfig)
	var h *monitor.SilenceDetector
	if !hc.Disabled {
		var err error
		c := hc.SilenceConfig()
		c.DB, c.Metrics, c.Leader, c.Logger = pool, reg, leader, log.With(slog.String("component", "silence"))
		c.Sources = sourceNames(cfg)
		h, err = monitor.NewSilenceDetector(c)
		if err != nil {
			return nil, nil, err
		}
	}
	tc := hc.EventTypesConfig()
	tc.DB, tc.Metrics, tc.Leader, tc.Logger = pool, reg, leader, log.With(slog.String("component", "event-types"))
	types, err := monitor.NewEventTypes(tc)
	if err != nil {
		return nil, nil, err
	}
	var loops loop.Group
	loops.Go(ctx, func(ctx context.Context) { types.Run(ctx, hc.TypesEvery) })
	if h != nil {
		loops.Go(ctx, func(ctx context.Context) { h.Run(ctx, hc.CheckEvery) })
	}
	return h, func() { loops.Stop(); leader.Close() }, nil
}

// startMetricsListener serves reg's /metrics with the probes on addr ("off":
// none).
func startMetricsListener(ctx context.Context, addr string, reg *prometheus.Registry, ready func(context.Context) error, log *slog.Logger) (*health.Server, error) {
	if addr == "off" {
		return nil, nil
	}
	s, err := health.Start(ctx, addr, ready, metricsHandler(reg), log)
	if err == nil {
		noteLoopback(log, "ingress.metrics_listen", s.Addr())
	}
	return s, err
}

// noteLoopback says so when the listener of field, which serves /metrics,
// is reachable from this machine only (the default).
func noteLoopback(log *slog.Logger, field, addr string) {
	if loopback(addr) {
		log.Info("metrics listener on loopback only: this machine can scrape it, no other host can; set "+field+" to bind another address",
			slog.String("addr", addr))
	}
}

// loopback reports whether the listen address addr binds a loopback
// interface only.
func loopback(addr string) bool { return inletyaml.Loopback(addr) }

func metricsHandler(reg *prometheus.Registry) http.Handler { return metrics.Handler(reg) }

// newDashboard is the admin listener's dashboard. Its silent-source flags
// come from a detector of its own over the operator pool, with the
// silence section's thresholds, evaluated on each page load (no alerts:
// those are the streamer's).
func newDashboard(cfg inletyaml.Config, pool *pgxpool.Pool, limiter *admin.AuthLimiter, log *slog.Logger) (http.Handler, error) {
	names := sourceNames(cfg)
	dc := dashboard.Config{DB: pool, Token: cfg.Admin.Token, Sources: names, AuthLimiter: limiter, Logger: log.With(slog.String("component", "dashboard")),
		MaxTypesPerSource: cfg.Silence.MaxTypesPerSource}
	if !cfg.Silence.Disabled {
		hc := cfg.Silence.SilenceConfig()
		hc.DB, hc.Logger, hc.AlertURL = pool, log, "" // no alerts: those are the streamer's
		hc.Sources = names
		h, err := monitor.NewSilenceDetector(hc)
		if err != nil {
			return nil, err
		}
		dc.Silence = dashboardSilence{h}
	}
	return dashboard.New(dc)
}

// sourceNames are the names of cfg's sources (inlet streamer reads their
// names alone); nil for a file without sources (a service's own file), so
// that the silence detector judges every source with an event.
func sourceNames(cfg inletyaml.Config) []string {
	if len(cfg.Sources) == 0 {
		return nil
	}
	names := make([]string, 0, len(cfg.Sources))
	for _, s := range cfg.Sources {
		names = append(names, s.Name)
	}
	return names
}

// dashboardSilence shows a detector's judgement on the dashboard.
type dashboardSilence struct{ h *monitor.SilenceDetector }

func (d dashboardSilence) SourceActivity(ctx context.Context) ([]dashboard.SourceActivity, error) {
	sts, err := d.h.Evaluate(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]dashboard.SourceActivity, len(sts))
	for i, s := range sts {
		out[i] = dashboard.SourceActivity{Source: s.Source, LastSeen: s.LastSeen, Silent: s.Silent, Reason: s.Reason}
	}
	return out, nil
}

// setupTracing exports this process's spans as tracing says (a no-op when
// off); the returned func flushes them.
func setupTracing(ctx context.Context, cfg inletyaml.Config, service string, log *slog.Logger) (func(), error) {
	shutdown, err := tracing.Setup(ctx, tracing.Config{Endpoint: cfg.Tracing.OTLPEndpoint, SampleRatio: cfg.Tracing.SampleRatio, Service: "inlet-" + service})
	if err != nil {
		return nil, err
	}
	if cfg.Tracing.OTLPEndpoint != "" {
		log.Info("tracing on", slog.Float64("sample_ratio", cfg.Tracing.Ratio()))
	}
	return func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := shutdown(sctx); err != nil {
			log.Warn("flush spans", slog.String("error", err.Error()))
		}
	}, nil
}
