package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/inlet-dev/inlet/ingress"
	"github.com/inlet-dev/inlet/inletyaml"
	"github.com/inlet-dev/inlet/internal/config"
	"github.com/inlet-dev/inlet/internal/database"
	"github.com/inlet-dev/inlet/internal/metrics"
	"github.com/inlet-dev/inlet/internal/notify"
)

func runIngress(ctx context.Context, env *environment, args []string) error {
	fs := newFlagSet(env, "ingress", "", `
Run the webhook receiver: POST /webhooks/{source} for every source in the
config file, plus GET /healthz and GET /readyz (and the same with GET /metrics
on ingress.metrics_listen, default 127.0.0.1:8083: this machine only). Each
webhook is verified and committed to Postgres before the 2xx. SIGTERM stops
accepting, drains in-flight requests for --drain-timeout, then exits.

With admin.listen set it also serves the admin HTTP API (events, dead letters,
replay; bearer admin.token) on that listener, as admin.db_role.`)
	cfgPath := configFlag(fs)
	listen := fs.String("listen", "", "listen address (overrides ingress.listen)")
	drain := fs.Duration("drain-timeout", 20*time.Second, "how long SIGTERM waits for in-flight requests")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := flagsOnly(fs); err != nil {
		return err
	}
	cfg, _, err := loadServiceConfig(*cfgPath, config.IngressService, nil)
	if err != nil {
		return err
	}
	if cfg.DatabaseURL, err = databaseURL("", cfg.DatabaseURL); err != nil {
		return err
	}
	if *listen != "" {
		cfg.Ingress.Listen = *listen
	}
	log := stderrLogger(cfg, "json").With(slog.String("service", "ingress"))
	if limit, set := ingress.ApplyMemoryLimit(cfg.Ingress); set { // from the body budget, unless GOMEMLIMIT is set
		log.Info("go memory limit", slog.Int64("bytes", limit))
	}
	stopTracing, err := setupTracing(ctx, cfg, "ingress", log)
	if err != nil {
		return err
	}
	defer stopTracing()
	pool, err := database.Open(ctx, cfg.DatabaseURL, database.Options{Role: *cfg.Ingress.DBRole, AppName: "inlet-ingress"})
	if err != nil {
		return err
	}
	defer pool.Close()
	hinter := notify.NewHinter(pool, 0, log)
	defer hinter.Stop()
	adm, err := startAdmin(ctx, cfg, stderrLogger(cfg, "json")) // admin.listen: the admin API, on its own listener
	if err != nil {
		return err
	}
	defer adm.stop()
	reg := metrics.NewRegistry()
	srv, err := startIngress(ctx, cfg, pool, hinter, reg, log)
	if err != nil {
		return err
	}
	ms, err := startMetricsListener(ctx, cfg.Ingress.MetricsListen, reg, srv.Ready, log)
	if err != nil {
		return err
	}
	<-ctx.Done()
	err = stopIngress(srv, *drain, log)
	_ = ms.Stop(context.Background())
	return err
}

func startIngress(ctx context.Context, cfg inletyaml.Config, pool *pgxpool.Pool, hinter ingress.Hinter, reg prometheus.Registerer, log *slog.Logger) (*ingress.Server, error) {
	var store ingress.Store = ingress.NewPGStore(pool, hinter)
	if !cfg.Ingress.GroupCommit.Disabled {
		store = ingress.NewGroupStore(pool, hinter, cfg.Ingress.GroupConfig())
	}
	srv, err := ingress.New(ingress.Config{
		Section: cfg.Ingress,
		Sources: cfg.Sources,
		Store:   store,
		Ready:   database.Ready(pool),
		Logger:  log,
		Metrics: reg,
	})
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	if err := srv.Start(ctx); err != nil {
		return nil, err
	}
	warnPublicSecrets(cfg, log)
	return srv, nil
}

// reachablePublicSecrets names the sources that accept a secret of the
// embedded defaults (public) when ingress listens beyond this machine, so
// any host that reaches it can send webhooks that verify; nil otherwise.
func reachablePublicSecrets(cfg inletyaml.Config) []string {
	if loopback(cfg.Ingress.Listen) {
		return nil
	}
	return inletyaml.PublicSecretSources(cfg)
}

// warnPublicSecrets logs reachablePublicSecrets' sources, if any.
func warnPublicSecrets(cfg inletyaml.Config, log *slog.Logger) {
	names := reachablePublicSecrets(cfg)
	if len(names) == 0 {
		return
	}
	log.Warn("sources verify with Inlet's public development secrets while ingress listens beyond this machine: "+
		"any host that reaches it can send webhooks that verify; give these sources secrets of your own, "+
		"or listen on loopback (inlet dev --listen 127.0.0.1:8080)",
		slog.String("addr", cfg.Ingress.Listen), slog.Any("sources", names))
}

func stopIngress(srv *ingress.Server, drain time.Duration, log *slog.Logger) error {
	log.Info("draining ingress", slog.Duration("deadline", drain))
	ctx, cancel := context.WithTimeout(context.Background(), drain)
	defer cancel()
	if err := srv.Stop(ctx); err != nil {
		return fmt.Errorf("drain ingress: %w", err)
	}
	log.Info("ingress stopped")
	return nil
}
