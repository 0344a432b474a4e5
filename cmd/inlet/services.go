package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/inlet-dev/inlet/consumers/bus"
	"github.com/inlet-dev/inlet/consumers/bus/natsbus"
	"github.com/inlet-dev/inlet/inletyaml"
	"github.com/inlet-dev/inlet/internal/config"
	"github.com/inlet-dev/inlet/internal/health"
	"github.com/inlet-dev/inlet/internal/metrics"
	"github.com/inlet-dev/inlet/schema"
)

// openBus opens the configured transport. Separate services need one that
// crosses processes.
func openBus(ctx context.Context, cfg inletyaml.Config, service string, log *slog.Logger) (bus.PubSub, error) {
	switch cfg.Bus.Kind {
	case "nats":
		return natsbus.New(ctx, natsbus.Config{
			URL: cfg.Bus.URL, Name: "inlet-" + service, AckWait: cfg.Bus.AckWait, Replicas: cfg.Bus.Replicas, Storage: cfg.Bus.Storage, Logger: log,
		})
	case "gochannel":
		if service != "dev" {
			return nil, fmt.Errorf("bus.kind: gochannel connects streamer and consumers only inside one process; "+
				"run inlet dev, or set bus.kind: nats to run inlet %s on its own", service)
		}
		return bus.NewGoChannel(log), nil
	}
	return nil, fmt.Errorf("bus.kind: %q is not gochannel or nats", cfg.Bus.Kind)
}

// busHealthy is the bus's own health where it reports one (natsbus: the
// connection, stalled subscriptions).
func busHealthy(ps bus.PubSub) error {
	if h, ok := ps.(interface{ Healthy() error }); ok {
		if err := h.Healthy(); err != nil {
			return fmt.Errorf("the bus: %w", err)
		}
	}
	return nil
}

func runStreamer(ctx context.Context, env *environment, args []string) error {
	fs := newFlagSet(env, "streamer", "", `
Run the streamer: wake on LISTEN/NOTIFY (streamer.wake) and on a poll tick,
lease due jobs in batches, and publish a reference per job to its handler's
topic on the bus (bus.kind: nats). Any number of streamers may run at once.
Watches every source for silence (silence:), and reconciles with the
providers' event lists when reconcile.enabled (one replica at a time). Serves
GET /healthz, /readyz and /metrics on streamer.health_listen (default
127.0.0.1:8081: this machine only); /readyz answers 503 until the streamer
has started, from SIGTERM on, and while the database does not answer or
takes no writes (a standby, read-only), the connection to NATS is down, or
the bus has refused every reference since the last it took (/healthz
answers 200 throughout). SIGTERM finishes the claim round in
progress and exits; jobs it leased stay leased until their consumers report
or the lease expires.`)
	cfgPath := configFlag(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := flagsOnly(fs); err != nil {
		return err
	}
	cfg, _, err := loadServiceConfig(*cfgPath, config.StreamerService, nil)
	if err != nil {
		return err
	}
	if cfg.DatabaseURL, err = databaseURL("", cfg.DatabaseURL); err != nil {
		return err
	}
	log := stderrLogger(cfg, "json").With(slog.String("service", "streamer"))
	stopTracing, err := setupTracing(ctx, cfg, "streamer", log)
	if err != nil {
		return err
	}
	defer stopTracing()
	ps, err := openBus(ctx, cfg, "streamer", log)
	if err != nil {
		return err
	}
	defer ps.Close()
	reg := metrics.NewRegistry()
	str, pool, err := newStreamer(ctx, cfg, ps, reg, log)
	if err != nil {
		return err
	}
	defer pool.Close()
	_, stopMonitors, err := startMonitors(ctx, cfg, pool, reg, log)
	if err != nil {
		return err
	}
	defer stopMonitors()
	stopReconcile, err := startReconcile(ctx, cfg, reg, log)
	if err != nil {
		return err
	}
	defer stopReconcile()
	// Served before str.Start, so that /healthz answers while Start waits
	// (the replication stream, up to 15s), but not ready until it has
	// returned: str.Healthy judges a streamer never started by the bus
	// alone, and this one claims nothing yet (review helper-253).
	var started atomic.Bool
	hs, err := health.Start(ctx, cfg.Streamer.HealthListen, func(ctx context.Context) error {
		if !started.Load() {
			return errors.New("streamer: starting")
		}
		// Not ready while the bus refuses every reference or (NATS) the
		// connection is down: nothing is delivered meanwhile.
		// The database must take writes too: a standby or a read-only
		// server answers the schema check while every claim fails.
		return errors.Join(str.Healthy(ctx), busHealthy(ps), schema.CheckWritable(ctx, pool))
	}, metricsHandler(reg), log)
	if err != nil {
		return err
	}
	noteLoopback(log, "streamer.health_listen", hs.Addr())
	stopSealer, err := startSealer(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer stopSealer()
	stopReporter, err := startReporter(ctx, cfg, reg, log)
	if err != nil {
		return err
	}
	defer stopReporter()
	if err := str.Start(ctx); err != nil {
		return err
	}
	started.Store(true)
	<-ctx.Done()
	log.Info("stopping streamer")
	str.Stop() // not ready from here on (Streamer.Healthy)
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = hs.Stop(sctx)
	log.Info("streamer stopped")
	return nil
}

func runConsumer(ctx context.Context, env *environment, args []string) error {
	fs := newFlagSet(env, "consumer", "", `
Run the ready consumers of consumer.handlers (log, http-forward): register
their subscriptions, take their jobs from the bus (bus.kind: nats), and record
each outcome on its job. Replicas of the same handlers share the work.
Serves GET /healthz, /readyz and /metrics on consumer.health_listen (default
127.0.0.1:8082: this machine only); /readyz answers 503 until every
handler's topic is subscribed, from SIGTERM on, and while the database does
not answer or takes no writes, or a subscription is not consuming (/healthz
answers 200 throughout). SIGTERM stops
taking jobs and waits up to --drain-timeout for running attempts; an attempt
still running then is cut off, records nothing and gives its lease back: its
job is pending again at once and the attempt does not count (should giving it
back fail, the expired lease counts as an attempt). Set the timeout above the
handlers' usual run time, as a cut-off handler runs again from the start.

Your own consumers: build a binary with the consumers package (see
consumers/example).`)
	cfgPath := configFlag(fs)
	drain := fs.Duration("drain-timeout", 30*time.Second, "how long SIGTERM waits for running attempts (one still running then is cut off and given back, not counted)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := flagsOnly(fs); err != nil {
		return err
	}
	cfg, _, err := loadServiceConfig(*cfgPath, config.ConsumerService, nil)
	if err != nil {
		return err
	}
	if cfg.DatabaseURL, err = databaseURL("", cfg.DatabaseURL); err != nil {
		return err
	}
	if len(cfg.Consumer.Handlers) == 0 {
		return errors.New("consumer.handlers: none configured, nothing to run")
	}
	log := stderrLogger(cfg, "json").With(slog.String("service", "consumer"))
	stopTracing, err := setupTracing(ctx, cfg, "consumer", log)
	if err != nil {
		return err
	}
	defer stopTracing()
	ps, err := openBus(ctx, cfg, "consumer", log)
	if err != nil {
		return err
	}
	defer ps.Close()
	reg := metrics.NewRegistry()
	svc, pool, err := newConsumers(ctx, cfg, ps, reg, log)
	if err != nil {
		return err
	}
	defer pool.Close()
	hs, err := health.Start(ctx, cfg.Consumer.HealthListen, func(ctx context.Context) error {
		// svc.Healthy is not nil until svc.Start has subscribed every
		// handler's topic, nor once svc.Stop has begun (review helper-253).
		// Writable too: every outcome is a write (schema.ErrReadOnly).
		return errors.Join(svc.Healthy(), schema.CheckWritable(ctx, pool))
	}, metricsHandler(reg), log)
	if err != nil {
		return err
	}
	noteLoopback(log, "consumer.health_listen", hs.Addr())
	// Started before inlet migrate finished (a rollout that starts the
	// services beside the migration job): wait for it, not ready meanwhile,
	// as ingress and the streamer do. Registering against the older schema
	// failed on what it lacks (080's another_role_given: exit 1, a crash
	// loop; review helper-339).
	if !awaitSchema(ctx, pool, log) {
		_ = hs.Stop(context.Background())
		return nil
	}
	if err := svc.Start(ctx); err != nil {
		return err
	}
	<-ctx.Done()
	log.Info("draining consumer", slog.Duration("deadline", *drain))
	dctx, cancel := context.WithTimeout(context.Background(), *drain)
	defer cancel()
	err = svc.Stop(dctx)
	_ = hs.Stop(dctx)
	if err != nil {
		return fmt.Errorf("drain consumer: %w", err)
	}
	log.Info("consumer stopped")
	return nil
}

// schemaRecheck is how often a service waiting for inlet migrate reads the
// schema version again.
var schemaRecheck = 2 * time.Second

// awaitSchema returns once the database's schema is current (true), or
// false when ctx ends first. Any failed check is waited out, not only
// ErrSchemaNotCurrent: a database with no schema yet (a first install whose
// migration job runs beside the services) or one refusing connections for
// a moment would otherwise make Start fail and the process exit (a crash
// loop), where ingress and the streamer stay up, not ready (review
// helpers 339 and 341). Each different failure is logged once.
func awaitSchema(ctx context.Context, db schema.Querier, log *slog.Logger) bool {
	said := ""
	for {
		err := schema.Check(ctx, db)
		if ctx.Err() != nil {
			return false // SIGTERM, also during the check: not a failure
		}
		if err == nil {
			if said != "" {
				log.Info("database schema is current; starting")
			}
			return true
		}
		if msg := err.Error(); msg != said {
			said = msg
			log.Warn("waiting for inlet migrate and the database before registering (readyz answers 503 meanwhile)", slog.String("error", msg))
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(schemaRecheck):
		}
	}
}
