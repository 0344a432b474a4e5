package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/inlet-dev/inlet/internal/config"
	"github.com/inlet-dev/inlet/internal/health"
	"github.com/inlet-dev/inlet/internal/metrics"
	"github.com/inlet-dev/inlet/relay"
)

func runRelay(ctx context.Context, env *environment, args []string) error {
	fs := newFlagSet(env, "relay", "", `
Run the pass-through relay: POST /webhooks/{source} verifies each webhook with
the source's secrets exactly as ingress does, then forwards the exact bytes and
headers, signed with relay.secrets (Inlet-Relay-Signature), to the customer's
ingress at relay.target, whose source lists those secrets as relay_secrets.
It answers the provider 2xx only after the ingress did (after its commit),
503 with Retry-After when the ingress fails or cannot be reached. Nothing is
stored and no body or header value is logged; GET /healthz answers ok, and
relay.metrics_listen (default 127.0.0.1:8085: this machine only) serves
GET /metrics.
SIGTERM stops accepting, drains in-flight forwards for --drain-timeout, then
exits.`)
	cfgPath := configFlag(fs)
	listen := fs.String("listen", "", "listen address (overrides relay.listen)")
	drain := fs.Duration("drain-timeout", 20*time.Second, "how long SIGTERM waits for in-flight requests")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := flagsOnly(fs); err != nil {
		return err
	}
	cfg, _, err := loadServiceConfig(*cfgPath, config.RelayService, nil)
	if err != nil {
		return err
	}
	if *listen != "" {
		cfg.Relay.Listen = *listen
	}
	log := stderrLogger(cfg, "json").With(slog.String("service", "relay"))
	reg := metrics.NewRegistry()
	srv, err := relay.New(relay.Config{Section: cfg.Relay, Sources: cfg.Sources, Logger: log, Metrics: reg})
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	if addr := cfg.Relay.WithDefaults().MetricsListen; addr != "off" {
		ms, err := health.Start(ctx, addr, func(context.Context) error { return nil }, metricsHandler(reg), log)
		if err != nil {
			return err
		}
		noteLoopback(log, "relay.metrics_listen", ms.Addr())
		defer func() { _ = ms.Stop(context.Background()) }()
	}
	if err := srv.Start(ctx); err != nil {
		return err
	}
	<-ctx.Done()
	log.Info("draining relay", slog.Duration("deadline", *drain))
	stopCtx, cancel := context.WithTimeout(context.Background(), *drain)
	defer cancel()
	if err := srv.Stop(stopCtx); err != nil {
		return fmt.Errorf("drain relay: %w", err)
	}
	log.Info("relay stopped")
	return nil
}
