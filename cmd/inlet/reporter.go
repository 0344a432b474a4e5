package main

import (
	"context"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/inlet-dev/inlet/inletyaml"
	"github.com/inlet-dev/inlet/internal/database"
	"github.com/inlet-dev/inlet/reporter"
)

// startReporter starts the metadata reporter when reporter.url is set, on a
// small pool of its own as the streamer's role; stop ends it and closes the
// pool. Without reporter.url both are no-ops.
func startReporter(ctx context.Context, cfg inletyaml.Config, reg prometheus.Registerer, log *slog.Logger) (stop func(), err error) {
	rc := cfg.Reporter
	if rc.URL == "" {
		return func() {}, nil
	}
	pool, err := database.Open(ctx, cfg.DatabaseURL, database.Options{Role: *cfg.Streamer.DBRole, MaxConns: 2, AppName: "inlet-reporter"})
	if err != nil {
		return nil, err
	}
	c := rc.Config()
	c.Pool, c.Logger, c.Metrics = pool, log.With(slog.String("component", "reporter")), reg
	rep, err := reporter.New(c)
	if err != nil {
		pool.Close()
		return nil, err
	}
	if err := rep.Start(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	return func() { rep.Stop(); pool.Close() }, nil
}
