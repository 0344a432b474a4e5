package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/consumers"
	"github.com/inlet-dev/inlet/ingress/sources"
	"github.com/inlet-dev/inlet/ingress/verify"
	"github.com/inlet-dev/inlet/internal/database"
	"github.com/inlet-dev/inlet/internal/inletyaml"
	"github.com/inlet-dev/inlet/internal/metrics"
	"github.com/inlet-dev/inlet/internal/notify"
	"github.com/inlet-dev/inlet/internal/pgcluster"
	"github.com/inlet-dev/inlet/retention"
	"github.com/inlet-dev/inlet/schema"
)

func runDev(ctx context.Context, env *environment, args []string) error {
	fs := newFlagSet(env, "dev", "", `
Run Inlet in one process for local use. Without --config (and without an
./inlet.yaml) it uses embedded defaults: sources stripe, github and acme
(Standard Webhooks) with development secrets, listening on :8080.

Without a database URL (database_url / DATABASE_URL) it starts a throwaway
PostgreSQL from this machine's binaries with its data under --data-dir
(installing the binaries with apt-get first when they are missing and you are
root). Migrations are applied at start. Delete the data directory to start
over.`)
	cfgPath := configFlag(fs)
	dataDir := fs.String("data-dir", ".inlet", "directory for the local PostgreSQL when no database URL is set")
	listen := fs.String("listen", "", "listen address (overrides ingress.listen)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	cfg, from, err := loadConfig(*cfgPath, inletyaml.Dev)
	if err != nil {
		return err
	}
	if *listen != "" {
		cfg.Ingress.Listen = *listen
	}
	log := stderrLogger(cfg, "text")
	log.Info("configuration loaded", slog.String("from", from), slog.Int("sources", len(cfg.Sources)))
	stopTracing, err := setupTracing(ctx, cfg, "dev", log)
	if err != nil {
		return err
	}
	defer stopTracing()

	if cfg.DatabaseURL == "" {
		pgDir := filepath.Join(*dataDir, "pg")
		cluster, err := pgcluster.New(ctx, pgcluster.Config{Dir: pgDir, Install: true, Logger: log})
		if errors.Is(err, pgcluster.ErrUnreachableDir) {
			// As root in a home directory the postgres user cannot enter: keep
			// the cluster in a machine-wide place named after this directory.
			abs, _ := filepath.Abs(pgDir)
			sum := sha256.Sum256([]byte(abs))
			pgDir = filepath.Join("/var/tmp", "inlet-dev-"+hex.EncodeToString(sum[:6]), "pg")
			log.Warn("the postgres user cannot reach the data directory; using another", slog.String("wanted", abs), slog.String("using", pgDir))
			cluster, err = pgcluster.New(ctx, pgcluster.Config{Dir: pgDir, Install: true, Logger: log})
		}
		if err != nil {
			return fmt.Errorf("local PostgreSQL: %w", err)
		}
		if err := cluster.Start(ctx); err != nil {
			return fmt.Errorf("local PostgreSQL: %w", err)
		}
		defer func() {
			log.Info("stopping local PostgreSQL")
			if err := cluster.Stop(); err != nil {
				log.Error("stop local PostgreSQL", slog.String("error", err.Error()))
			}
		}()
		cfg.DatabaseURL = cluster.URL("postgres")
		_ = os.MkdirAll(*dataDir, 0o755) //nolint:gosec // G301: the postgres user (when run as root) must enter every directory above the cluster; pgcluster keeps its own 0700
		_ = os.WriteFile(filepath.Join(*dataDir, "database_url"), []byte(cfg.DatabaseURL+"\n"), 0o600)
		log.Info("local PostgreSQL started", slog.String("bin", cluster.BinDir()),
			slog.String("data", pgDir), slog.String("url", redactURL(cfg.DatabaseURL)))
	}

	if err := migrateURL(ctx, cfg.DatabaseURL, cfg.Retention, log); err != nil {
		return err
	}
	ps, err := openBus(ctx, cfg, "dev", log)
	if err != nil {
		return err
	}
	defer ps.Close()

	reg := metrics.NewRegistry()
	var cons *consumers.Service
	if len(cfg.Consumer.Handlers) > 0 {
		svc, cpool, err := newConsumers(ctx, cfg, ps, reg, log.With(slog.String("service", "consumer")))
		if err != nil {
			return err
		}
		defer cpool.Close()
		if err := svc.Start(ctx); err != nil {
			return err
		}
		cons = svc
	}
	stopSealer, err := startSealer(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer stopSealer()
	str, spool, err := newStreamer(ctx, cfg, ps, reg, log.With(slog.String("service", "streamer")))
	if err != nil {
		return err
	}
	defer spool.Close()
	_, stopMonitors, err := startMonitors(ctx, cfg, spool, reg, log)
	if err != nil {
		return err
	}
	defer stopMonitors()
	stopReporter, err := startReporter(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer stopReporter()
	if err := str.Start(ctx); err != nil {
		return err
	}

	pool, err := database.Open(ctx, cfg.DatabaseURL, database.Options{Role: *cfg.Ingress.DBRole, AppName: "inlet-dev-ingress"})
	if err != nil {
		return err
	}
	defer pool.Close()
	hinter := notify.NewHinter(pool, 0, log)
	defer hinter.Stop()
	adm, err := startAdmin(ctx, cfg, log) // admin.listen: the admin API, on its own listener
	if err != nil {
		return err
	}
	defer adm.stop()
	srv, err := startIngress(ctx, cfg, pool, hinter, reg, log.With(slog.String("service", "ingress")))
	if err != nil {
		return err
	}
	ms, err := startMetricsListener(ctx, cfg.Ingress.MetricsListen, reg, database.Ready(pool), log)
	if err != nil {
		return err
	}
	defer func() { _ = ms.Stop(context.Background()) }()
	printWalkthrough(env, cfg, srv.Addr().String(), from)
	<-ctx.Done()
	err = stopIngress(srv, 10*time.Second, log)
	str.Stop()
	if cons != nil {
		dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if cerr := cons.Stop(dctx); cerr != nil && err == nil {
			err = fmt.Errorf("drain consumers: %w", cerr)
		}
	}
	return err
}

// migrateURL migrates the database and creates partitions ahead.
func migrateURL(ctx context.Context, url string, r retention.Section, log *slog.Logger) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return fmt.Errorf("connect to database: %w", err)
	}
	defer conn.Close(context.Background())
	applied, err := schema.Migrate(ctx, conn)
	if err != nil {
		return err
	}
	log.Info("schema current", slog.Int("version", schema.Latest()), slog.Int("applied_now", len(applied)))
	if _, err := schema.BuildIndexes(ctx, conn, func(b schema.IndexBuild) {
		log.Info("building partition index concurrently", slog.String("index", b.Index), slog.String("partition", b.Partition))
	}); err != nil {
		return err
	}
	return ensurePartitions(ctx, conn, r, log)
}

func printWalkthrough(env *environment, cfg inletyaml.Config, addr, from string) {
	_, port, _ := splitHostPort(addr)
	base := "http://localhost:" + port
	fmt.Fprintf(env.stdout, "\nInlet is running on %s (config: %s).\n\nSend a signed test webhook (in another terminal):\n\n", base, from)
	for _, s := range cfg.Sources {
		fmt.Fprintf(env.stdout, "  go run ./cmd/inlet send %s --url %s\n", s.Name, base)
	}
	if gh, ok := firstOfType(cfg, "github"); ok {
		// GitHub signs no timestamp: a signed request printed here could be
		// replayed for as long as the secret lives, so only the public
		// development secret gets a ready one.
		if len(gh.Secrets) > 0 && gh.Secrets[0] == devGitHubSecret {
			body := `{"zen":"Keep it logically awesome."}`
			h := verify.SignGitHub(gh.Secrets[0], "00000000-0000-0000-0000-000000000001", "ping", []byte(body))
			fmt.Fprintf(env.stdout, "\nor with curl (sending it twice shows the duplicate answer):\n\n"+
				"  curl -i %s/webhooks/%s -H 'X-GitHub-Event: ping' -H 'X-GitHub-Delivery: %s' \\\n    -H 'X-Hub-Signature-256: %s' --data-raw '%s'\n",
				base, gh.Name, h.Get("X-GitHub-Delivery"), h.Get("X-Hub-Signature-256"), body)
		} else {
			fmt.Fprintf(env.stdout, "\n(No ready curl for %s: its secret is your own, and a signed request printed here\n"+
				"would stay valid as long as the secret does. inlet send signs one when you run it.)\n", gh.Name)
		}
	}
	target, note := psqlTarget(cfg.DatabaseURL)
	fmt.Fprintf(env.stdout, "\nThen look at what arrived:\n\n  psql %s -c 'SELECT id, provider, external_event_id, event_type, received_at FROM webhook_ingress.events'\n%s",
		target, note)
	if cfg.Admin.Listen != "" {
		fmt.Fprintf(env.stdout, "\nor on the dashboard: http://%s/dashboard/", dashboardHost(cfg.Admin.Listen))
		if cfg.Admin.Token == devAdminToken { // a token of your own is never printed
			fmt.Fprintf(env.stdout, " (token: %s)", devAdminToken)
		}
		fmt.Fprintln(env.stdout)
	}
	if cfg.Ingress.MetricsListen != "off" {
		fmt.Fprintf(env.stdout, "\nMetrics: http://%s/metrics", dashboardHost(cfg.Ingress.MetricsListen))
		if loopback(cfg.Ingress.MetricsListen) {
			fmt.Fprint(env.stdout, " (this machine only: set ingress.metrics_listen to scrape from others)")
		}
		fmt.Fprintln(env.stdout)
	}
	fmt.Fprintf(env.stdout, "\nCtrl-C stops.\n\n")
}

// psqlTarget is the database argument of the walkthrough's psql command,
// quoted for a shell and never with a password: "$DATABASE_URL" when that is
// where the URL came from, else the URL redacted, with a note saying so.
func psqlTarget(dbURL string) (target, note string) {
	red := redactURL(dbURL)
	switch {
	case red == dbURL:
		return "'" + dbURL + "'", ""
	case os.Getenv("DATABASE_URL") == dbURL:
		return `"$DATABASE_URL"`, ""
	}
	return "'" + red + "'", "  (the password is left out: put yours where " + redactMark + " is)\n"
}

// devGitHubSecret is the embedded defaults' github secret
// (internal/inletyaml/dev.yaml), public by design.
const devGitHubSecret = "inlet-dev-github-secret" //nolint:gosec // G101: the embedded dev defaults' secret, public by design

// devAdminToken is the embedded defaults' admin token (internal/inletyaml/dev.yaml).
const devAdminToken = "inlet-dev-admin-token" //nolint:gosec // G101: the embedded dev defaults' token, public by design

// dashboardHost is a listen address as a browser reaches it.
func dashboardHost(listen string) string {
	host, port, err := splitHostPort(listen)
	if err != nil {
		return listen
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "localhost"
	}
	return net.JoinHostPort(host, port)
}

func firstOfType(cfg inletyaml.Config, typ string) (sources.Source, bool) {
	for _, s := range cfg.Sources {
		if s.Type == typ {
			return s, true
		}
	}
	return sources.Source{}, false
}
