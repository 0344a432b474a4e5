package main

import (
	"context"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/inlet-dev/inlet/inletyaml"
	"github.com/inlet-dev/inlet/internal/database"
	"github.com/inlet-dev/inlet/monitor"
	"github.com/inlet-dev/inlet/reporter"
)

// startReporter starts the metadata reporter when reporter.url is set, on a
// small pool of its own as the streamer's role. Of several streamers on one
// database one reporter sends at a time: the holder of the advisory lock
// reporter.LockName, on a connection of its own (not the pool's); the
// others take over when it goes. stop ends it, gives up the lock and closes
// the pool. Without reporter.url both are no-ops.
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
	leader := monitor.NewNamedLeader(pool.Config().ConnConfig, reporter.LockName)
	c.Pool, c.Leader, c.Logger, c.Metrics = pool, leader, log.With(slog.String("component", "reporter")), reg
	rep, err := reporter.New(c)
	if err != nil {
		pool.Close()
		return nil, err
	}
	if err := rep.Start(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	return func() { rep.Stop(); leader.Close(); pool.Close() }, nil
}
