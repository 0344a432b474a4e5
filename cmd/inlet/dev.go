package main

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/inlet-dev/inlet/consumers"
	"github.com/inlet-dev/inlet/ingress/sources"
	"github.com/inlet-dev/inlet/ingress/verify"
	"github.com/inlet-dev/inlet/inletyaml"
	"github.com/inlet-dev/inlet/internal/database"
	"github.com/inlet-dev/inlet/internal/metrics"
	"github.com/inlet-dev/inlet/internal/notify"
	"github.com/inlet-dev/inlet/internal/pgcluster"
	"github.com/inlet-dev/inlet/retention"
	"github.com/inlet-dev/inlet/schema"
)

func runDev(ctx context.Context, env *environment, args []string) (err error) {
	fs := newFlagSet(env, "dev", "", `
Run Inlet in one process for local use. Without --config it reads
./inlet.yaml, else the project's (that of the nearest parent directory
holding an inlet.yaml or a .git, as every command does); with neither it uses
embedded defaults: sources stripe, github and acme (Standard Webhooks) with
development secrets, the webhook listener on :8080, /metrics on
127.0.0.1:8083 and the admin API and dashboard on 127.0.0.1:8084
(INLET_LISTEN, INLET_METRICS_LISTEN and INLET_ADMIN_LISTEN move them, as the
flags below do). A config file gets inlet dev's own defaults for the keys it
leaves out among audit.seal_every (10s), silence.check_every (10s) and
admin.listen (127.0.0.1:8084, with the public development token when it sets
no admin.token either); a key it sets keeps its value, 0 or "" (off)
included. Each listener is checked before anything starts: one in use fails
at once, naming its setting.

Without a database URL (database_url in the config file, else DATABASE_URL)
it starts a throwaway PostgreSQL from this machine's binaries with its data
under --data-dir (installing the binaries with apt-get first when they are
missing and you are root), on the port it had last time unless another
process has taken it, and writes its URL to <data-dir>/database_url: every
other inlet command run from this directory, or from a directory below it,
uses it. Migrations are applied at start. Ctrl-C drains, stops that
PostgreSQL and exits 0; a second Ctrl-C skips the drain but still stops it
(exit 130). Delete the data
directory to start over. (As root, when the postgres user cannot enter the
data directory, as under /root, the PostgreSQL data lives in
/var/tmp/inlet-dev-ID instead, ID from <data-dir>/cluster_id, and a warning
at start names it: deleting the data directory still starts over, and
leaves that directory for you to remove.)

Once its webhook listener is up it writes the URL that reaches it to
<data-dir>/ingress_url (http://localhost:PORT for a wildcard host), and
removes it when it stops: inlet send without --url, run from this directory
or one below it, posts there. (After a kill -9 the file stays behind; the
next inlet dev here replaces it, and inlet send's error names it.)`)
	cfgPath := configFlag(fs)
	dataDir := fs.String("data-dir", devDataDir, "directory for the local PostgreSQL when no database URL is set")
	listen := fs.String("listen", "", "webhook listen address (overrides ingress.listen)")
	metricsListen := fs.String("metrics-listen", "", "/metrics and health listen address, or off (overrides ingress.metrics_listen)")
	adminListen := fs.String("admin-listen", "", "admin API and dashboard listen address, or off (overrides admin.listen)")
	portBase := fs.Int("port-base", 0, "move every listener to ports from this one: webhooks N, /metrics N+3, admin API N+4 (hosts kept)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := flagsOnly(fs); err != nil {
		return err
	}
	cfg, from, err := loadConfig(*cfgPath, inletyaml.Dev)
	if err != nil {
		return err
	}
	var devDefaults []string // the keys the file leaves out that take inlet dev's own defaults
	if from != "embedded defaults" {
		if cfg, devDefaults, err = withDevDefaults(cfg, from); err != nil {
			return err
		}
	}
	if err := applyDevListeners(&cfg, *portBase, *listen, *metricsListen, *adminListen); err != nil {
		return err
	}
	if cfg.DatabaseURL == "" {
		// Before the listeners are checked: a second inlet dev here is told
		// so, not that its ports are taken.
		unlock, err := lockDataDir(*dataDir)
		if err != nil {
			return err
		}
		defer unlock()
	}
	if err := checkDevListeners(cfg, from == "embedded defaults"); err != nil {
		return err
	}
	// Ctrl-C for inlet alone, so that go run and Task end with its status;
	// the terminal goes back to them last.
	restore := takeTerminal()
	unhook := onForcedExit(restore)
	defer func() { unhook(); restore() }()
	log := stderrLogger(cfg, "text")
	started := false
	defer func() {
		// Interrupted while starting: the operator's Ctrl-C, handled (what
		// had started is stopped by the deferred calls), not a failure.
		if err != nil && !started && ctx.Err() != nil {
			log.Info("interrupted while starting", slog.String("error", err.Error()))
			err = nil
		}
	}()
	log.Info("configuration loaded", slog.String("from", from), slog.Int("sources", len(cfg.Sources)))
	if len(devDefaults) > 0 {
		log.Info("keys the config file leaves out take inlet dev's own defaults (set them in the file to change them)",
			slog.String("file", from), slog.String("keys", strings.Join(devDefaults, ", ")),
			slog.Duration("audit.seal_every", cfg.Audit.SealEvery), slog.Duration("silence.check_every", cfg.Silence.CheckEvery))
	}
	stopTracing, err := setupTracing(ctx, cfg, "dev", log)
	if err != nil {
		return err
	}
	defer stopTracing()

	if cfg.DatabaseURL == "" {
		stop, err := startDevPostgreSQL(ctx, &cfg, *dataDir, log)
		if err != nil {
			return err
		}
		defer stop()
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
		defer func() { // on an error at start; a no-op after the drain below
			dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = svc.Stop(dctx)
		}()
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
	stopReporter, err := startReporter(ctx, cfg, reg, log)
	if err != nil {
		return err
	}
	defer stopReporter()
	if err := str.Start(ctx); err != nil {
		return err
	}
	defer str.Stop() // on an error at start; a no-op after the drain below

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
	ms, err := startMetricsListener(ctx, cfg.Ingress.MetricsListen, reg, srv.Ready, log)
	if err != nil {
		return err
	}
	defer func() { _ = ms.Stop(context.Background()) }()
	defer recordIngressURL(*dataDir, srv.Addr().String(), log)()
	printWalkthrough(env, cfg, srv.Addr().String(), from)
	started = true
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

// withDevDefaults is cfg, read from the config file path, with inlet dev's
// own defaults for the keys the file leaves out (inletyaml.WithDevDefaults:
// those the documentation gives as "X in inlet dev"), and those keys.
func withDevDefaults(cfg inletyaml.Config, path string) (inletyaml.Config, []string, error) {
	b, err := os.ReadFile(path) //nolint:gosec // G304: the operator's own config file, read a moment ago
	if err != nil {
		return cfg, nil, fmt.Errorf("read config %s: %w", path, err)
	}
	cfg, keys, err := inletyaml.WithDevDefaults(cfg, b)
	if err != nil {
		return cfg, nil, fmt.Errorf("config file %s: %w", path, err)
	}
	return cfg, keys, nil
}

// startDevPostgreSQL starts the local PostgreSQL of inlet dev under dataDir,
// on the port of its last start when that is free, points cfg at it and
// writes its URL to dataDir/database_url. stop stops it; a second signal
// (onForcedExit) stops it too, so no exit path leaves it running.
func startDevPostgreSQL(ctx context.Context, cfg *inletyaml.Config, dataDir string, log *slog.Logger) (func(), error) {
	urlFile := filepath.Join(dataDir, "database_url")
	previous, prevPort := previousURL(urlFile)
	pgDir := filepath.Join(dataDir, "pg")
	// Never the port of one of inlet dev's own listeners, which are free
	// now and bound once the database is up.
	var avoid []int
	for _, l := range devListeners(*cfg) {
		if _, p, err := net.SplitHostPort(l.addr); err == nil {
			if n, err := strconv.Atoi(p); err == nil && n > 0 {
				avoid = append(avoid, n)
			}
		}
	}
	pc := pgcluster.Config{Dir: pgDir, PreferPort: prevPort, AvoidPorts: avoid, Install: true, Logger: log}
	cluster, err := pgcluster.New(ctx, pc)
	if errors.Is(err, pgcluster.ErrUnreachableDir) {
		// As root in a home directory the postgres user cannot enter: keep
		// the cluster in a machine-wide place, named by an id in dataDir.
		var fallback string
		if fallback, err = devFallbackDir(dataDir, log); err == nil {
			pc.Dir = filepath.Join(fallback, "pg")
			log.Warn(fmt.Sprintf("the postgres user cannot reach %s, so the local PostgreSQL keeps its data in %s instead "+
				"(named by %s): deleting %s still starts over with a new, empty database, and leaves that directory behind; "+
				"rm -rf %s removes it once no inlet dev uses it", dataDir, pc.Dir, filepath.Join(dataDir, clusterIDFile), dataDir, fallback),
				slog.String("wanted", pgDir), slog.String("using", pc.Dir))
			cluster, err = pgcluster.New(ctx, pc)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("local PostgreSQL: %w", err)
	}
	// Registered before Start: a second signal while it starts stops it too.
	// Once: the deferred stop and a second signal's may run at the same time.
	stopCluster := sync.OnceFunc(func() {
		log.Info("stopping local PostgreSQL")
		if err := cluster.Stop(); err != nil {
			log.Error("stop local PostgreSQL", slog.String("error", err.Error()))
		}
	})
	unhook := onForcedExit(stopCluster)
	// This process holds the directory (lockDataDir): a server still running
	// on it was left by an inlet dev killed without stopping it.
	if pid, err := cluster.StopLeftover(ctx); err != nil {
		unhook()
		return nil, fmt.Errorf("local PostgreSQL: %w", err)
	} else if pid != 0 {
		log.Warn("stopped the local PostgreSQL an earlier inlet dev left running (it was killed without stopping it)", slog.Int("pid", pid))
	}
	if err := cluster.Start(ctx); err != nil {
		unhook()
		if errors.Is(err, pgcluster.ErrExistingDidNotStart) {
			// The data an earlier start made may be what fails; the
			// operator's way out, as the README gives it.
			return nil, fmt.Errorf("local PostgreSQL: %w\n(if it cannot start on that data again, delete %s to start over with a new, empty database)", err, dataDir)
		}
		return nil, fmt.Errorf("local PostgreSQL: %w", err)
	}
	cfg.DatabaseURL = cluster.URL("postgres")
	_ = os.MkdirAll(dataDir, 0o755) //nolint:gosec // G301: the postgres user (when run as root) must enter every directory above the cluster; pgcluster keeps its own 0700
	if err := os.WriteFile(urlFile, []byte(cfg.DatabaseURL+"\n"), 0o600); err != nil {
		log.Warn("the other inlet commands will not find the local PostgreSQL", slog.String("error", err.Error()))
	}
	log.Info("local PostgreSQL started", slog.String("bin", cluster.BinDir()),
		slog.String("data", pc.Dir), slog.String("url", redactURL(cfg.DatabaseURL)))
	if prevPort != 0 && cluster.Port() != prevPort {
		log.Warn(fmt.Sprintf("the local PostgreSQL's port %d is taken by another process: it listens on %d now, so its URL changed; "+
			"update a DATABASE_URL or database_url that holds the old one", prevPort, cluster.Port()),
			slog.String("old_url", redactURL(previous)), slog.String("url", redactURL(cfg.DatabaseURL)))
	}
	return func() { unhook(); stopCluster() }, nil
}

// recordIngressURL writes the URL of inlet dev's webhook listener at addr
// to dataDir/ingress_url, where inlet send finds it (ingressURL): the port
// --port-base, --listen or the config file chose, so send needs no --url.
// remove deletes it, as a second signal does (onForcedExit), so a stopped
// inlet dev leaves no URL behind to aim at; only while it still holds this
// URL, in case another inlet dev here (on an external database, which
// takes no lock on dataDir) has written its own since. When this one
// overwrote the URL of another inlet dev here that still runs, remove puts
// that one back instead: the second stopping left the first unfound.
func recordIngressURL(dataDir, addr string, log *slog.Logger) (remove func()) {
	path := filepath.Join(dataDir, "ingress_url")
	if abs, err := filepath.Abs(path); err == nil {
		path = abs // removed from there, whatever the working directory is by then
	}
	// The URL and this process's id: inlet send skips the file of an inlet
	// dev that is gone (a kill -9 leaves it behind, and another process may
	// listen on that port since: review helper-220).
	u := "http://" + dashboardHost(addr) + " " + strconv.Itoa(os.Getpid())
	if err := os.MkdirAll(dataDir, 0o755); err != nil { //nolint:gosec // G301: as lockDataDir's
		log.Warn("inlet send will not find the webhook listener without --url", slog.String("error", err.Error()))
		return func() {}
	}
	prev := ""                                   // another running inlet dev's "URL PID", overwritten here
	if b, err := os.ReadFile(path); err == nil { //nolint:gosec // G304: inlet dev's own --data-dir
		if f := strings.Fields(string(b)); len(f) == 2 && f[1] != strconv.Itoa(os.Getpid()) && processAlive(f[1]) {
			prev = f[0] + " " + f[1]
		}
	}
	if err := os.WriteFile(path, []byte(u+"\n"), 0o600); err != nil {
		log.Warn("inlet send will not find the webhook listener without --url", slog.String("error", err.Error()))
		return func() {}
	}
	rm := sync.OnceFunc(func() {
		b, err := os.ReadFile(path) //nolint:gosec // G304: inlet dev's own --data-dir
		if err != nil || strings.TrimSpace(string(b)) != u {
			return
		}
		if prev != "" && processAlive(strings.Fields(prev)[1]) {
			_ = os.WriteFile(path, []byte(prev+"\n"), 0o600) //nolint:gosec // G703: inlet dev's own --data-dir
			return
		}
		_ = os.Remove(path)
	})
	unhook := onForcedExit(rm)
	return func() { unhook(); rm() }
}

// lockDataDir takes dataDir for this process: an flock on dataDir/lock,
// released when the process ends however it ends (a SIGKILL included), the
// pid written in it for the next one's message. A second inlet dev on the
// same directory is refused naming the first.
func lockDataDir(dataDir string) (func(), error) {
	if err := os.MkdirAll(dataDir, 0o755); err != nil { //nolint:gosec // G301: as startDevPostgreSQL's: the postgres user must enter it
		return nil, fmt.Errorf("create %s: %w", dataDir, err)
	}
	path := filepath.Join(dataDir, "lock")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600) //nolint:gosec // G304: inlet dev's own --data-dir
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		b, _ := io.ReadAll(io.LimitReader(f, 32))
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("another inlet dev (pid %s) is using %s: stop it first, or give this one another --data-dir",
				cmp.Or(strings.TrimSpace(string(b)), "unknown"), dataDir)
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return func() { _ = f.Close() }, nil // closing releases the lock
}

// previousURL is the URL an earlier inlet dev wrote to path, and its port
// (0 when there is none).
func previousURL(path string) (string, int) {
	b, err := os.ReadFile(path) //nolint:gosec // G304: the database_url file under inlet dev's own --data-dir
	if err != nil {
		return "", 0
	}
	u, err := url.Parse(strings.TrimSpace(string(b)))
	if err != nil || u.Hostname() != "127.0.0.1" {
		return "", 0
	}
	port, err := strconv.Atoi(u.Port())
	if err != nil {
		return "", 0
	}
	return u.String(), port
}

// devListener is one listener of inlet dev: its setting, its address, and
// what moves it.
type devListener struct {
	setting, what, addr, flag, env string
}

func devListeners(cfg inletyaml.Config) []devListener {
	ls := []devListener{{"ingress.listen", "webhooks", cfg.Ingress.Listen, "--listen", "INLET_LISTEN"}}
	if cfg.Ingress.MetricsListen != "off" {
		ls = append(ls, devListener{"ingress.metrics_listen", "/metrics and health", cfg.Ingress.MetricsListen, "--metrics-listen", "INLET_METRICS_LISTEN"})
	}
	if cfg.Admin.Listen != "" {
		ls = append(ls, devListener{"admin.listen", "admin API and dashboard", cfg.Admin.Listen, "--admin-listen", "INLET_ADMIN_LISTEN"})
	}
	return ls
}

// applyDevListeners applies inlet dev's listener flags to cfg: --port-base
// first, then each listener's own flag.
func applyDevListeners(cfg *inletyaml.Config, portBase int, listen, metricsListen, adminListen string) error {
	if portBase != 0 {
		if portBase < 1 || portBase > 65535-4 {
			return fmt.Errorf("%w: --port-base %d: want 1-65531", errUsage, portBase)
		}
		cfg.Ingress.Listen = withPort(cfg.Ingress.Listen, portBase)
		if cfg.Ingress.MetricsListen != "off" {
			cfg.Ingress.MetricsListen = withPort(cfg.Ingress.MetricsListen, portBase+3)
		}
		if cfg.Admin.Listen != "" {
			cfg.Admin.Listen = withPort(cfg.Admin.Listen, portBase+4)
		}
	}
	if listen != "" {
		cfg.Ingress.Listen = listen
	}
	if metricsListen != "" {
		cfg.Ingress.MetricsListen = metricsListen
	}
	switch adminListen {
	case "":
	case "off":
		cfg.Admin.Listen = ""
	default:
		cfg.Admin.Listen = adminListen
	}
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	return nil
}

// withPort is addr with its port replaced (its host kept).
func withPort(addr string, port int) string {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = ""
	}
	return net.JoinHostPort(host, strconv.Itoa(port))
}

// checkDevListeners binds each listener of inlet dev for a moment, before
// anything starts: one in use fails at once, in one line naming its setting
// and how to move it (the embedded defaults' variables, else the config
// file's setting), instead of after the database and the services started.
func checkDevListeners(cfg inletyaml.Config, embedded bool) error {
	for _, l := range devListeners(cfg) {
		ln, err := net.Listen("tcp", l.addr)
		if err == nil {
			_ = ln.Close()
			continue
		}
		move := l.flag + " ADDR"
		if embedded {
			move += " or " + l.env + "=ADDR"
		} else {
			move += " or " + l.setting + " in the config file"
		}
		if !errors.Is(err, syscall.EADDRINUSE) {
			// Not taken: an address this machine cannot bind.
			return fmt.Errorf("%s %s (%s): %s; set another with %s", l.setting, l.addr, l.what, err.Error(), move)
		}
		return fmt.Errorf("%s %s (%s): already in use by another process; stop what listens there, or move it with %s (--port-base N moves every listener of inlet dev)",
			l.setting, l.addr, l.what, move)
	}
	return nil
}

// migrateURL migrates the database and creates partitions ahead.
func migrateURL(ctx context.Context, url string, r retention.Section, log *slog.Logger) error {
	conn, err := connectURL(ctx, url, "inlet-dev-migrate")
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	applied, err := schema.Migrate(ctx, conn)
	if err != nil {
		return err
	}
	log.Info("schema current", slog.Int("version", schema.Latest()), slog.Int("applied_now", len(applied)))
	if _, err := schema.BuildIndexes(ctx, conn, func(b schema.IndexBuild) {
		log.Info("building partition index concurrently", slog.String("index", b.Index), slog.String("partition", b.Partition))
	}, func() {
		log.Info("waiting for another inlet migrate building partition indexes")
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
			body := []byte(`{"zen":"Keep it logically awesome."}`)
			h := verify.SignGitHub(gh.Secrets[0], "00000000-0000-0000-0000-000000000001", "ping", body)
			h.Set("Content-Type", "application/json")
			if cmd, err := curlCommand(http.MethodPost, base+"/webhooks/"+gh.Name, h, body, nil); err == nil {
				fmt.Fprintf(env.stdout, "\nor with curl (sending it twice shows the duplicate answer):\n\n  %s\n", cmd)
			}
		} else {
			fmt.Fprintf(env.stdout, "\n(No ready curl for %s: its secret is your own, and a signed request printed here\n"+
				"would stay valid as long as the secret does. inlet send signs one when you run it.)\n", gh.Name)
		}
	}
	fmt.Fprintf(env.stdout, "\n(inlet send SOURCE --curl prints a ready curl for any source; --handshake sends\n"+
		"its provider's endpoint check, or prints it with --curl.)\n")
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
// (inletyaml/dev.yaml), public by design.
const devGitHubSecret = "inlet-dev-github-secret" //nolint:gosec // G101: the embedded dev defaults' secret, public by design

// devAdminToken is the embedded defaults' admin token (inletyaml/dev.yaml).
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

// ownPrivateDir makes dir, in a world-writable place, or checks that the
// one there is this user's own directory that no one else may write: its
// name is predictable, and another account could have made it with a link
// inside that this user would follow, and hand its target to the postgres
// user.
func ownPrivateDir(dir string) error {
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) { //nolint:gosec // G301: the postgres user must enter it; pgcluster keeps its own 0700
		return fmt.Errorf("create %s: %w", dir, err)
	}
	fi, err := os.Lstat(dir) //nolint:gosec // G703: /var/tmp/inlet-dev- and hex digits only (validClusterID, or a hash)
	if err != nil {
		return err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !fi.IsDir() || !ok || int(st.Uid) != os.Geteuid() || fi.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("%s is not a directory of this user's that only it may write (a link, or another account's): remove it, "+
			"or run inlet dev in a directory the postgres user can enter", dir)
	}
	return nil
}

// clusterIDFile, in inlet dev's data directory, names the directory under
// /var/tmp that holds its PostgreSQL when the postgres user cannot reach the
// data directory itself.
const clusterIDFile = "cluster_id"

// devFallbackDir is where inlet dev keeps its cluster when the postgres user
// cannot reach dataDir (as root under a 0700 home): /var/tmp/inlet-dev-ID,
// ID read from dataDir/cluster_id, drawn at random and written there when
// missing. It is keyed on a file in dataDir, not on dataDir's path: deleting
// dataDir, the documented way to start over, then starts a new cluster,
// where one named after the path came back with every event stored before.
func devFallbackDir(dataDir string, log *slog.Logger) (string, error) {
	abs, err := filepath.Abs(dataDir)
	if err != nil {
		return "", fmt.Errorf("data directory %s: %w", dataDir, err)
	}
	idPath := filepath.Join(abs, clusterIDFile)
	b, err := os.ReadFile(idPath) //nolint:gosec // G304: a file under inlet dev's own --data-dir
	if err == nil {
		id := strings.TrimSpace(string(b))
		if !validClusterID(id) {
			return "", fmt.Errorf("%s holds %.40q, not a cluster id (12 to 32 hex digits): delete %s to start over", idPath, id, dataDir)
		}
		dir := filepath.Join("/var/tmp", "inlet-dev-"+id)
		return dir, ownPrivateDir(dir)
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("read %s: %w", idPath, err)
	}
	id, legacy := legacyFallbackID(abs)
	if !legacy {
		var r [8]byte
		_, _ = rand.Read(r[:]) // never fails (crypto/rand)
		id = hex.EncodeToString(r[:])
	}
	dir := filepath.Join("/var/tmp", "inlet-dev-"+id)
	if err := ownPrivateDir(dir); err != nil {
		return "", err
	}
	// For whoever finds the directory in /var/tmp: whose it was.
	if err := os.WriteFile(filepath.Join(dir, "data_dir"), []byte(abs+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("record the data directory in %s: %w", dir, err)
	}
	if err := os.WriteFile(idPath, []byte(id+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("write %s: %w", idPath, err)
	}
	if legacy {
		log.Info("the local PostgreSQL an earlier inlet dev kept in /var/tmp for this data directory is kept on", slog.String("dir", dir))
	}
	// Not removed here: a data directory moved away (kept as a backup)
	// still names its cluster, and only the operator knows.
	for _, old := range orphanFallbackDirs(abs, dir) {
		log.Warn(fmt.Sprintf("%s holds the local PostgreSQL of an earlier %s, deleted since (this start makes a new one in %s): "+
			"rm -rf %s removes it, unless a moved copy of that data directory still uses it", old, dataDir, dir, old))
	}
	return dir, nil
}

// orphanFallbackDirs are the directories under /var/tmp, other than
// current, that held the cluster of dataDir: each records it in its
// data_dir file, or is named after dataDir's path (inlet dev before
// cluster_id). Only this user's own, which no one else may write: the
// names are predictable, and a directory another account planted is not
// one to tell the operator to remove.
func orphanFallbackDirs(dataDir, current string) []string {
	legacy := filepath.Join("/var/tmp", "inlet-dev-"+legacyID(dataDir))
	dirs, _ := filepath.Glob("/var/tmp/inlet-dev-*")
	var out []string
	for _, d := range dirs {
		fi, err := os.Lstat(d)
		if d == current || err != nil || !fi.IsDir() || fi.Mode().Perm()&0o022 != 0 {
			continue
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); !ok || int(st.Uid) != os.Geteuid() {
			continue
		}
		if d == legacy {
			out = append(out, d)
			continue
		}
		b, err := os.ReadFile(filepath.Join(d, "data_dir")) //nolint:gosec // G304: inlet dev's own record, compared, never followed
		if err == nil && strings.TrimSpace(string(b)) == dataDir {
			out = append(out, d)
		}
	}
	return out
}

// legacyID is the id inlet dev before cluster_id gave dataDir's /var/tmp
// directory: from the path of dataDir/pg.
func legacyID(dataDir string) string {
	sum := sha256.Sum256([]byte(filepath.Join(dataDir, "pg")))
	return hex.EncodeToString(sum[:6])
}

// legacyFallbackID is the id of the /var/tmp directory that inlet dev
// before cluster_id named after the path of dataDir/pg, when dataDir is
// still the one that used it (its database_url is there) and that
// directory holds a cluster: an upgrade keeps its events. After dataDir was
// deleted there is no database_url, so that cluster is not taken up again.
func legacyFallbackID(dataDir string) (string, bool) {
	if _, err := os.Stat(filepath.Join(dataDir, "database_url")); err != nil {
		return "", false
	}
	id := legacyID(dataDir)
	if _, err := os.Stat(filepath.Join("/var/tmp", "inlet-dev-"+id, "pg", "data", "PG_VERSION")); err != nil {
		return "", false
	}
	return id, true
}

// validClusterID reports whether id can name a directory under /var/tmp:
// hex digits only, so no path separator or "..".
func validClusterID(id string) bool {
	if len(id) < 12 || len(id) > 32 {
		return false
	}
	_, err := hex.DecodeString(id) // even length too
	return err == nil
}
