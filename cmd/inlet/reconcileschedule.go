package main

import (
	"context"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/inlet-dev/inlet/backfill"
	"github.com/inlet-dev/inlet/ingress"
	"github.com/inlet-dev/inlet/inletyaml"
	"github.com/inlet-dev/inlet/internal/database"
	"github.com/inlet-dev/inlet/internal/loop"
	"github.com/inlet-dev/inlet/internal/notify"
	"github.com/inlet-dev/inlet/monitor"
)

// reconcileLockKey names the advisory lock of the one streamer that runs
// the scheduled reconcile.
const reconcileLockKey = "inlet:reconcile"

// startReconcile runs the reconcile: schedule of cfg, when enabled, on a
// small pool of its own as reconcile.db_role (ingress's: it stores events),
// one streamer replica at a time. The metrics are registered either way, so
// inlet_reconcile_missing_total is there to alert on.
func startReconcile(ctx context.Context, cfg inletyaml.Config, reg prometheus.Registerer, log *slog.Logger) (func(), error) {
	m, err := backfill.NewReconcileMetrics(reg)
	if err != nil {
		return nil, err
	}
	rc := cfg.Reconcile
	if !rc.Enabled {
		return func() {}, nil
	}
	pool, err := database.Open(ctx, cfg.DatabaseURL, database.Options{Role: rc.DBRole, AppName: "inlet-reconcile", MaxConns: 2})
	if err != nil {
		return nil, err
	}
	log = log.With(slog.String("component", "reconcile"))
	hinter := notify.NewHinter(pool, 0, log)
	leader := monitor.NewNamedLeader(pool.Config().ConnConfig, reconcileLockKey)
	var loops loop.Group
	loops.Go(ctx, func(ctx context.Context) {
		backfill.Schedule(ctx, backfill.ScheduleConfig{Section: rc, Store: ingress.NewPGStore(pool, hinter), DB: pool,
			Leader: leader, Metrics: m, Logger: log})
	})
	log.Info("reconcile scheduled", slog.Duration("interval", rc.Interval), slog.Duration("window", rc.Window), slog.Int("sources", len(rc.Sources)))
	return func() { loops.Stop(); leader.Close(); hinter.Stop(); pool.Close() }, nil
}
