package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/inlet-dev/inlet/controlplane"
	"github.com/inlet-dev/inlet/internal/config"
	"github.com/inlet-dev/inlet/internal/database"
	"github.com/inlet-dev/inlet/internal/httpserve"
)

func runControlPlane(ctx context.Context, env *environment, args []string) error {
	fs := newFlagSet(env, "control-plane", "", `
Run the control plane: a multi-tenant receiver of the reporters' attempt
metadata (reporter: in a data plane's config), with a database of its own
(control_plane.database_url; schema control_plane is created at start).
Serves on control_plane.listen:

  POST /api/v1/reports   a tenant's batch (bearer: the tenant's token);
                         answers the tenant's cursor and arrival number
                         before it, by which a reporter notices records a
                         restore from a backup lost, and sends them again
  GET  /api/v1/cursor    the highest attempt id and arrival number held for
                         the tenant
  GET  /                 the tenant's page: HTTP Basic, user = tenant name,
                         password = its token

It never receives bodies, headers or database credentials of a data plane.`)
	cfgPath := configFlag(fs)
	listen := fs.String("listen", "", "listen address (overrides control_plane.listen)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := flagsOnly(fs); err != nil {
		return err
	}
	cfg, _, err := loadServiceConfig(*cfgPath, config.ControlPlaneService, nil)
	if err != nil {
		return err
	}
	cp := cfg.ControlPlane
	if *listen != "" {
		cp.Listen = *listen
	}
	if err := cp.ValidateForServe(); err != nil {
		return err
	}
	log := stderrLogger(cfg, "json").With(slog.String("service", "control-plane"))
	pool, err := database.Open(ctx, cp.DatabaseURL, database.Options{AppName: "inlet-control-plane"})
	if err != nil {
		return err
	}
	defer pool.Close()
	// Its waits for tables in use (a backup of the database) are logged
	// here; after 2 minutes of them it fails, and the supervisor restarts it.
	applied, err := controlplane.MigrateWith(ctx, pool, controlplane.MigrateConfig{Logger: log})
	if err != nil {
		return err
	}
	tenants := cp.Tenants
	srv, err := controlplane.New(controlplane.Config{Pool: pool, Tenants: tenants, Logger: log})
	if err != nil {
		return err
	}
	hs, err := httpserve.Start(ctx, httpserve.Config{Name: "control plane", Addr: cp.Listen, Handler: srv,
		ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second, IdleTimeout: 120 * time.Second})
	if err != nil {
		return fmt.Errorf("control_plane.listen: %w", err)
	}
	log.Info("control plane listening", slog.String("addr", hs.Addr().String()),
		slog.Int("tenants", len(tenants)), slog.Int("migrations_applied", len(applied)))
	select {
	case <-ctx.Done():
	case <-hs.Done():
		return fmt.Errorf("control plane: %w", hs.Stop(ctx))
	}
	log.Info("stopping control plane")
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := hs.Stop(sctx); err != nil {
		return fmt.Errorf("stop control plane: %w", err)
	}
	log.Info("control plane stopped")
	return nil
}
