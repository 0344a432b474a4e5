package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel"

	"github.com/inlet-dev/inlet/audit"
	"github.com/inlet-dev/inlet/consumers"
	"github.com/inlet-dev/inlet/consumers/bus"
	"github.com/inlet-dev/inlet/consumers/httpforward"
	logconsumer "github.com/inlet-dev/inlet/consumers/log"
	"github.com/inlet-dev/inlet/filter"
	"github.com/inlet-dev/inlet/inletyaml"
	"github.com/inlet-dev/inlet/internal/database"
	"github.com/inlet-dev/inlet/monitor"
	"github.com/inlet-dev/inlet/streamer"
)

// newStreamer builds the streamer of cfg over its own pool, which the caller
// closes.
// Its metrics, and the queue and audit gauges read through its pool, go to
// reg.
func newStreamer(ctx context.Context, cfg inletyaml.Config, pub bus.PubSub, reg prometheus.Registerer, log *slog.Logger) (*streamer.Streamer, *pgxpool.Pool, error) {
	pool, err := database.Open(ctx, cfg.DatabaseURL, database.Options{Role: *cfg.Streamer.DBRole, AppName: "inlet-streamer"})
	if err != nil {
		return nil, nil, err
	}
	sc := cfg.Streamer.Config()
	sc.Pool, sc.Publisher, sc.Logger, sc.Metrics = pool, pub, log, reg
	switch cfg.Streamer.Wake {
	case "replication":
		url := cfg.DatabaseURL
		sc.ReplicationConnect = func(ctx context.Context) (*pgconn.PgConn, error) {
			return streamer.ConnectReplication(ctx, url)
		}
	case "notify":
		sc.ListenConnect = listenConnect(cfg.DatabaseURL)
	}
	s, err := streamer.New(sc)
	if err == nil {
		err = reg.Register(monitor.NewQueue(pool, log))
	}
	if err == nil {
		err = reg.Register(monitor.NewAudit(pool, log))
	}
	if err == nil {
		err = reg.Register(monitor.NewLimits(pool, log))
	}
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	return s, pool, nil
}

// newConsumers builds the ready consumers of cfg over their own pool, which
// the caller closes. Call it only with handlers configured.
func newConsumers(ctx context.Context, cfg inletyaml.Config, sub bus.PubSub, reg prometheus.Registerer, log *slog.Logger) (*consumers.Service, *pgxpool.Pool, error) {
	handlers, err := readyHandlers(cfg.Consumer.Handlers, log)
	if err != nil {
		return nil, nil, err
	}
	pool, err := database.Open(ctx, cfg.DatabaseURL, database.Options{Role: *cfg.Consumer.DBRole, AppName: "inlet-consumer"})
	if err != nil {
		return nil, nil, err
	}
	names := make([]string, len(handlers))
	for i, h := range handlers {
		names[i] = h.Name
	}
	m, err := consumerMetricsOn(reg, names)
	if err != nil {
		pool.Close()
		return nil, nil, fmt.Errorf("consumer metrics: %w", err)
	}
	svc, err := consumers.New(consumers.Config{
		Pool:           pool,
		Subscriber:     sub,
		Handlers:       handlers,
		LeaseExtend:    cfg.Consumer.LeaseExtend,
		Logger:         log,
		Metrics:        m,
		TracerProvider: otel.GetTracerProvider(),
		CheckFilter:    filter.Check,
	})
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	return svc, pool, nil
}

// readyHandlers turns the configured ready consumers into SDK handlers.
func readyHandlers(hs []consumers.ReadyHandler, log *slog.Logger) ([]consumers.Handler, error) {
	out := make([]consumers.Handler, 0, len(hs))
	for i, h := range hs {
		var f consumers.HandlerFunc
		switch h.Type {
		case "log":
			f = logconsumer.New(log.With(slog.String("handler", h.Name)))
		case "http-forward":
			var err error
			f, err = httpforward.New(httpforward.Config{URL: h.URL, Secret: h.Secret, Timeout: h.Timeout})
			if err != nil {
				return nil, fmt.Errorf("consumer.handlers[%d] %q: %w", i, h.Name, err)
			}
		default:
			return nil, fmt.Errorf("consumer.handlers[%d].type: %q is not log or http-forward", i, h.Type)
		}
		out = append(out, h.Handler(f))
	}
	return out, nil
}

// startSealer runs the tamper-evidence sealer when audit.seal_every is set;
// stop it with the returned func.
func startSealer(ctx context.Context, cfg inletyaml.Config, log *slog.Logger) (func(), error) {
	if cfg.Audit.SealEvery <= 0 {
		return func() {}, nil
	}
	pool, err := database.Open(ctx, cfg.DatabaseURL, database.Options{Role: *cfg.Audit.DBRole, AppName: "inlet-sealer", MaxConns: 2})
	if err != nil {
		return nil, err
	}
	s, err := audit.NewSealer(audit.Config{DB: pool, Grace: cfg.Audit.Grace, Interval: cfg.Audit.SealEvery, Logger: log.With(slog.String("component", "sealer"))})
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("audit: %w", err)
	}
	if err := s.Start(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	return func() { s.Stop(); pool.Close() }, nil
}

// listenConnect opens the streamer's LISTEN connection to url, the
// service's DATABASE_URL, without the settings that are its pool's
// (pool_max_conns, which the deployment files set): the server refuses a
// connection that sends them.
func listenConnect(url string) func(ctx context.Context) (*pgx.Conn, error) {
	return func(ctx context.Context) (*pgx.Conn, error) {
		c, err := pgx.ParseConfig(url)
		if err != nil {
			return nil, fmt.Errorf("database URL is not a valid PostgreSQL connection string")
		}
		database.DropClientParams(c.RuntimeParams)
		c.RuntimeParams["application_name"] = "inlet-streamer-listen"
		return pgx.ConnectConfig(ctx, c)
	}
}
