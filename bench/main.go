// Command bench measures Inlet against a baseline measured in the same run,
// on a throwaway PostgreSQL with fsync and synchronous_commit on, and prints
// the figures as a table and saves them as JSON under bench/.
//
//	go tool task bench              # or: go run ./bench -duration 5s
//
// Ingest: signed Stripe webhooks per second through HTTP → verified →
// committed, from a Go load generator on loopback at 1, 32 and 256
// connections, with group commit and without; p50/p99 of the 200. Baseline:
// pgbench running one single-row INSERT transaction per client at the same
// concurrency against the same cluster. Printed: ingest / baseline.
//
// End to end: the time from the ingress 200 to the handler call at a steady
// offered rate (-e2e-rate, default 1,000/s), with the streamer woken by
// NOTIFY, by logical replication, and by polling alone. Baseline: a webhook
// receiver built on River (receiver.go) at the same rate. Printed: Inlet's
// p99 / River's.
//
// Sustained: the highest offered webhook rate the whole pipeline (signed
// POST → handler call → job completed) holds for -duration with its backlog
// not growing, with 1 and with 3 handlers, against the River receiver, and
// for `inlet dev`'s embedded defaults and the separate services' defaults
// (-sustained-systems); then what each delivers offered twice that. Printed:
// / River, / Inlet's ingest-only peak. A saturation probe and at most
// -sustained-points rates per configuration keep the wall time bounded
// (about 6 runs of -duration each). The River receiver's settings are
// flags (-river-*), printed and saved with the figures.
//
// Scale: ClaimJobs and a job lookup by id with 0, 1 M and 10 M finished jobs
// in 13 weekly partitions (-scale-sizes), and the tables' sizes, dead tuples
// and autovacuum runs after 1 M events through the whole lifecycle
// (-scale-run-events).
//
// Jobs: jobs completed per second with a no-op handler, N loaded before the
// clock starts (-jobs, default 20,000), with 1 and 4 consumer replicas over
// the in-process bus and over NATS JetStream. Baseline: River (the library;
// its CLI is not installable here) working the same number of jobs on the
// same cluster, as river bench -n does. Printed: Inlet / River. With
// -jobs-rls each Inlet configuration runs twice: its consumers as
// webhook_worker and as a per-consumer role (inlet roles create-consumer),
// which row-level security holds to its handler. Printed: / worker role.
//
// Memory: the peak resident set of inlet ingress, streamer and consumer, each
// its own process over NATS, while 256 connections post 1 MiB Stripe-signed
// bodies to ingress for -duration and until the consumer has run them all.
//
// Soak (only when named: -only soak): `inlet dev` on its embedded defaults
// offered -soak-rate webhooks/s (default 500) for -soak-duration (default
// 20m), sampled every -soak-every: its resident set and threads, the
// database's sessions, the backlog, dead tuples in jobs, the tables' sizes
// and the p99 from arrival to completion. Printed: each sample, and the last
// third's mean ÷ the first third's for the resident set, threads and sessions.
//
// Each measurement is a section (-only picks some); its figures are saved
// under its name in the JSON. The e2e, jobs and sustained measurements also
// print what the database did per delivered job (statements from
// pg_stat_statements, which the cluster preloads when the server has it;
// transactions and rows written from the cumulative statistics).
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/ingress"
	"github.com/inlet-dev/inlet/ingress/sources"
	"github.com/inlet-dev/inlet/ingress/verify"
	"github.com/inlet-dev/inlet/internal/database"
	"github.com/inlet-dev/inlet/internal/natstest"
	"github.com/inlet-dev/inlet/internal/pgcluster"
	"github.com/inlet-dev/inlet/schema"
)

const stripeSecret = "whsec_bench_secret"

// Result is one measured row.
type Result struct {
	Name        string  `json:"name"`
	Connections int     `json:"connections"`
	PerSecond   float64 `json:"per_second"`
	P50ms       float64 `json:"p50_ms,omitempty"`
	P99ms       float64 `json:"p99_ms,omitempty"`
	Errors      int64   `json:"errors"`
	// Stored is the requests answered 200 (ingest; Cost is per stored event).
	Stored int64 `json:"stored,omitempty"`
	Cost   *Cost `json:"cost,omitempty"`
}

// bench is what every measurement gets: the run's cluster, the owner's URL,
// how long each measurement runs, and a logger for warnings.
type bench struct {
	cluster  *pgcluster.Cluster
	url      string
	duration time.Duration
	levels   []int
	rate     int
	log      *slog.Logger
	// statements says the cluster loaded pg_stat_statements, so each
	// measurement can count its statements.
	statements bool
}

// section is one measurement of the run: it prints its own table and returns
// what is saved under its name in the JSON.
type section struct {
	name string
	run  func(ctx context.Context, b *bench) (any, error)
	// optIn leaves the section out of -only's default: it runs only when
	// named.
	optIn bool
}

var sections = []section{
	{name: "ingest", run: runIngest},
	{name: "e2e", run: runEndToEnd},
	{name: "scale", run: runScale},
	{name: "jobs", run: runJobs},
	{name: "memory", run: runMemory},
	{name: "sustained", run: runSustained},
	{name: "payload", run: runPayload},
	{name: "soak", run: runSoak, optIn: true},
}

// e2eWakes are the e2e section's wake sources, all three unless narrowed
// while looking into one.
var e2eWakes = flag.String("e2e-wakes", "notify,replication,poll", "e2e section: the streamer's wake sources to measure, comma-separated")

// pgSettings are the -pg-setting flags: tuning tried on the run's cluster.
var pgSettings = map[string]string{}

func main() {
	duration := flag.Duration("duration", 5*time.Second, "how long each measurement runs")
	conns := flag.String("connections", "1,32,256", "concurrency levels of the ingest measurement")
	out := flag.String("out", "bench", "directory for the JSON results")
	rate := flag.Int("e2e-rate", 1000, "offered webhooks per second of the end-to-end measurement")
	var names []string
	for _, s := range sections {
		if !s.optIn {
			names = append(names, s.name)
		}
	}
	only := flag.String("only", strings.Join(names, ","), "the measurements to run, comma-separated (soak runs only when named: -only soak)")
	flag.Func("pg-setting", "a PostgreSQL setting for the run's cluster, name=value (repeatable), e.g. autovacuum_naptime=10s", func(v string) error {
		name, value, ok := strings.Cut(v, "=")
		if !ok || name == "" {
			return fmt.Errorf("%q is not name=value", v)
		}
		pgSettings[strings.TrimSpace(name)] = strings.TrimSpace(value)
		return nil
	})
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the bench process (in-process services included) to this file")
	flag.Parse()
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench: -cpuprofile:", err)
			os.Exit(2)
		}
		defer pprof.StopCPUProfile()
	}
	if err := run(*duration, *conns, *out, *rate, *only); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		pprof.StopCPUProfile()
		os.Exit(1)
	}
}

func run(duration time.Duration, connList, outDir string, rate int, only string) error {
	ctx := context.Background()
	b := &bench{duration: duration, rate: rate}
	for _, s := range strings.Split(connList, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			return fmt.Errorf("-connections: %q is not a list of positive numbers", connList)
		}
		b.levels = append(b.levels, n)
	}
	if rate < 1 {
		return fmt.Errorf("-e2e-rate: %d is not a positive rate", rate)
	}
	var chosen []section
	for _, name := range strings.Split(only, ",") {
		name = strings.TrimSpace(name)
		i := slices.IndexFunc(sections, func(s section) bool { return s.name == name })
		if i < 0 {
			var names []string
			for _, s := range sections {
				names = append(names, s.name)
			}
			return fmt.Errorf("-only: no measurement %q (there are: %s)", name, strings.Join(names, ", "))
		}
		chosen = append(chosen, sections[i])
	}
	dir, err := os.MkdirTemp("/var/tmp", "inlet-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if err := os.Chmod(dir, 0o755); err != nil { // the server's user must enter it
		return err
	}
	b.log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	settings := map[string]string{"fsync": "on", "synchronous_commit": "on", "max_connections": "400", "shared_buffers": "256MB",
		"wal_level": "logical", "max_replication_slots": "4", "max_wal_senders": "4"}
	bin, err := pgcluster.FindBinaries(ctx, pgcluster.FindOptions{Install: true, Logger: b.log})
	if err != nil {
		return err
	}
	// Statement counts per job come from pg_stat_statements, which must be
	// preloaded; a server without the library would not start with it.
	if statementsLibrary(bin) {
		settings["shared_preload_libraries"] = "pg_stat_statements"
	}
	maps.Copy(settings, pgSettings)
	cluster, err := pgcluster.New(ctx, pgcluster.Config{Dir: filepath.Join(dir, "pg"), Install: true, Logger: b.log,
		Settings: settings})
	if err != nil {
		return err
	}
	if err := cluster.Start(ctx); err != nil {
		return err
	}
	defer func() {
		if err := cluster.Stop(); err != nil {
			b.log.Warn("stop the bench PostgreSQL", slog.String("error", err.Error()))
		}
	}()
	defer natstest.Cleanup() // the nats-server binary the jobs and memory sections built
	b.cluster, b.url = cluster, cluster.URL("postgres")
	conn, err := pgx.Connect(ctx, b.url)
	if err != nil {
		return err
	}
	if _, err := schema.Migrate(ctx, conn); err != nil {
		return err
	}
	if err := addHistory(ctx, conn, *historyWeeks); err != nil {
		return err
	}
	conn.Close(ctx)
	fmt.Printf("PostgreSQL %s, fsync=on, synchronous_commit=on; %s per measurement\n", cluster.BinDir(), duration)
	if strings.Contains(settings["shared_preload_libraries"], "pg_stat_statements") {
		if err := createStatementsExtension(ctx, b.url); err != nil {
			fmt.Printf("pg_stat_statements did not load (%v): no statement counts, only transactions and rows\n", err)
		} else {
			b.statements = true
		}
	} else {
		fmt.Println("pg_stat_statements is not installed with the server: no statement counts, only transactions and rows")
	}
	if len(pgSettings) > 0 {
		fmt.Printf("settings from -pg-setting: %v\n", pgSettings)
	}

	saved := map[string]any{"duration": duration.String()}
	if len(pgSettings) > 0 {
		saved["pg_settings"] = pgSettings
	}
	// A section that fails is reported and recorded; the others still run
	// and are saved.
	var failed []error
	for _, s := range chosen {
		fmt.Printf("\n== %s ==\n\n", s.name)
		v, err := s.run(ctx, b)
		if err != nil {
			err = fmt.Errorf("%s: %w", s.name, err)
			fmt.Fprintln(os.Stderr, "bench:", err)
			failed = append(failed, err)
			v = map[string]string{"error": err.Error()}
		}
		saved[s.name] = v
	}
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return err
	}
	path := filepath.Join(outDir, "bench-"+time.Now().UTC().Format("20060102T150405Z")+".json")
	out, _ := json.MarshalIndent(saved, "", "  ")
	if err := os.WriteFile(path, append(out, '\n'), 0o644); err != nil {
		return err
	}
	fmt.Printf("\nsaved %s\n", path)
	return errors.Join(failed...)
}

// runIngest measures ingest against the pgbench baseline at each level.
func runIngest(ctx context.Context, b *bench) (any, error) {
	conn, err := pgx.Connect(ctx, b.url)
	if err != nil {
		return nil, err
	}
	_, err = conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS bench_baseline (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, body bytea NOT NULL)`)
	conn.Close(ctx)
	if err != nil {
		return nil, err
	}
	var results []Result
	baseline := map[int]float64{}
	for _, n := range b.levels {
		tps, err := pgbench(ctx, b.cluster, b.url, n, b.duration)
		if err != nil {
			return nil, err
		}
		baseline[n] = tps
		results = append(results, Result{Name: "pgbench single-row INSERT", Connections: n, PerSecond: tps})
		for _, group := range []bool{true, false} {
			m, err := b.startMeter(ctx, b.url)
			if err != nil {
				return nil, err
			}
			r, err := ingest(ctx, b.url, n, b.duration, group)
			if err != nil {
				m.close()
				return nil, err
			}
			if r.Cost, err = m.finish(ctx, r.Stored); err != nil {
				return nil, err
			}
			results = append(results, r)
		}
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "MEASUREMENT\tCONNS\tPER SECOND\tP50 MS\tP99 MS\tERRORS\t/ BASELINE")
	for _, r := range results {
		ratio := r.PerSecond / baseline[r.Connections]
		fmt.Fprintf(tw, "%s\t%d\t%.0f\t%s\t%s\t%d\t%.2f×\n", r.Name, r.Connections, r.PerSecond, ms(r.P50ms), ms(r.P99ms), r.Errors, ratio)
	}
	tw.Flush()
	for _, r := range results {
		if r.Cost != nil {
			fmt.Printf("%s, %d connections:\n", r.Name, r.Connections)
			r.Cost.printPer("  ", "stored event")
		}
	}
	return results, nil
}

// runEndToEnd measures the 200-to-handler latency for each wake source and
// for the River receiver, at the steady offered rate and at saturation.
func runEndToEnd(ctx context.Context, b *bench) (any, error) {
	var latencies []Latency
	river := map[int]float64{} // the River receiver's p99 by offered rate
	wakes := strings.Split(*e2eWakes, ",")
	for _, w := range wakes {
		if !slices.Contains([]string{"notify", "replication", "poll"}, w) {
			return nil, fmt.Errorf("-e2e-wakes: %q is not notify, replication or poll", w)
		}
	}
	for _, rate := range []int{b.rate, 0} {
		for _, wake := range wakes {
			l, err := endToEnd(ctx, b, wake, rate, b.duration)
			if err != nil {
				return nil, fmt.Errorf("%s at %d/s: %w", wake, rate, err)
			}
			latencies = append(latencies, l)
		}
		l, err := riverEndToEnd(ctx, b, rate, b.duration)
		if err != nil {
			return nil, fmt.Errorf("receiver on River at %d/s: %w", rate, err)
		}
		latencies = append(latencies, l)
		river[rate] = l.P99ms
	}
	for i, l := range latencies {
		if l.System == "inlet" && river[l.Rate] > 0 {
			latencies[i].VsRiver = l.P99ms / river[l.Rate]
		}
	}
	fmt.Printf("From the 200 to the handler call, %s each, the first %s of a steady rate left out as warm-up (Inlet: poll_interval 1s; River receiver: %s; saturation: %d connections posting back to back):\n\n",
		b.duration, e2eWarmUp, settingsLine(riverForLatency().settings(1)), e2eConns)
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "OFFERED\tSYSTEM\tWAKE\tDELIVERED\tDELIVERED/S\tP50 MS\tP99 MS\tMAX MS\tERRORS\tP99 / RIVER")
	for _, l := range latencies {
		offered := "saturation"
		if l.Rate > 0 {
			offered = strconv.Itoa(l.Rate) + "/s"
		}
		vs := "-"
		if l.VsRiver > 0 {
			vs = fmt.Sprintf("%.2f×", l.VsRiver)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%.0f\t%.2f\t%.2f\t%.2f\t%d\t%s\n", offered, l.System, l.Wake, l.Delivered, l.PerSecond, l.P50ms, l.P99ms, l.MaxMs, l.Errors, vs)
	}
	tw.Flush()
	fmt.Println()
	for _, l := range latencies {
		offered := "saturation"
		if l.Rate > 0 {
			offered = strconv.Itoa(l.Rate) + "/s"
		}
		fmt.Printf("%s %s at %s:\n", l.System, l.Wake, offered)
		if st := l.Stages; st != nil {
			fmt.Printf("  received → claimed p50 %.2f ms, p99 %.2f ms; claimed → handler p50 %.2f ms, p99 %.2f ms\n",
				st.ToClaimP50ms, st.ToClaimP99ms, st.ToHandlerP50ms, st.ToHandlerP99ms)
		}
		l.Cost.print("  ")
	}
	return latencies, nil
}

func ms(v float64) string {
	if v == 0 {
		return "-"
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}

var tpsLine = regexp.MustCompile(`tps = ([0-9.]+) \(without initial connection time\)`)

// pgbench runs the baseline: each client commits one single-row INSERT of a
// body the size of the webhooks' per transaction.
func pgbench(ctx context.Context, c *pgcluster.Cluster, url string, clients int, d time.Duration) (float64, error) {
	script, err := os.CreateTemp("", "inlet-bench-*.sql")
	if err != nil {
		return 0, err
	}
	defer os.Remove(script.Name())
	if _, err := fmt.Fprintln(script, `INSERT INTO bench_baseline (body) VALUES (convert_to(repeat('x', 300), 'UTF8'));`); err != nil {
		script.Close()
		return 0, fmt.Errorf("write pgbench script %s: %w", script.Name(), err)
	}
	if err := script.Close(); err != nil {
		return 0, fmt.Errorf("write pgbench script %s: %w", script.Name(), err)
	}
	bin, err := findPgbench(c.BinDir())
	if err != nil {
		return 0, err
	}
	cmd := exec.CommandContext(ctx, bin, "-n", "-c", strconv.Itoa(clients), "-j", strconv.Itoa(min(clients, 4)),
		"-T", strconv.Itoa(int(d.Seconds())), "-f", script.Name(), url)
	outB, err := cmd.CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("pgbench -c %d: %w\n%s", clients, err, outB)
	}
	m := tpsLine.FindSubmatch(outB)
	if m == nil {
		return 0, fmt.Errorf("pgbench -c %d: no tps in its output:\n%s", clients, outB)
	}
	return strconv.ParseFloat(string(m[1]), 64)
}

// findPgbench looks beside the server binaries, on PATH, then in Debian's
// versioned directories (newest first).
func findPgbench(binDir string) (string, error) {
	if p := filepath.Join(binDir, "pgbench"); fileExists(p) {
		return p, nil
	}
	if p, err := exec.LookPath("pgbench"); err == nil {
		return p, nil
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pgbench")
	slices.SortFunc(dirs, func(a, b string) int {
		va, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(a))))
		vb, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(b))))
		return vb - va
	})
	if len(dirs) > 0 {
		return dirs[0], nil
	}
	return "", fmt.Errorf("pgbench not found beside %s, on PATH or in /usr/lib/postgresql/*/bin (Debian: apt-get install postgresql-<version>)", binDir)
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// ingest runs ingress in this process on loopback and drives it with conns
// keep-alive connections for d.
func ingest(ctx context.Context, url string, conns int, d time.Duration, group bool) (Result, error) {
	pool, err := database.Open(ctx, url, database.Options{Role: schema.IngressRole, MaxConns: 16, AppName: "inlet-bench-ingress"})
	if err != nil {
		return Result{}, err
	}
	defer pool.Close()
	var store ingress.Store = ingress.NewPGStore(pool, nil)
	name := "inlet ingest, one transaction each"
	if group {
		store = ingress.NewGroupStore(pool, nil, ingress.GroupConfig{})
		name = "inlet ingest, group commit"
	}
	srv, err := ingress.New(ingress.Config{
		Section: ingress.Section{Listen: "127.0.0.1:0", StoreTimeout: 5 * time.Second, WriteTimeout: 10 * time.Second},
		Sources: []sources.Source{{Name: "stripe", Config: verify.Config{Type: "stripe", Secrets: []string{stripeSecret}}}},
		Store:   store,
		Logger:  slog.New(slog.DiscardHandler),
	})
	if err != nil {
		return Result{}, err
	}
	if err := srv.Start(ctx); err != nil {
		return Result{}, err
	}
	defer func() {
		if err := srv.Stop(context.Background()); err != nil {
			fmt.Fprintln(os.Stderr, "bench: stop ingress:", err)
		}
	}()
	base := "http://" + srv.Addr().(*net.TCPAddr).String() + "/webhooks/stripe"

	transport := &http.Transport{MaxIdleConnsPerHost: conns, MaxConnsPerHost: conns}
	client := &http.Client{Transport: transport, Timeout: 30 * time.Second}
	defer transport.CloseIdleConnections()
	var seq, errs atomic.Int64
	var mu sync.Mutex
	var lat []time.Duration
	stop := time.Now().Add(d)
	prefix := fmt.Sprintf("evt_bench_%t_%d_%d_", group, conns, time.Now().UnixNano())
	var wg sync.WaitGroup
	start := time.Now()
	for range conns {
		wg.Go(func() {
			mine := make([]time.Duration, 0, 1024)
			for time.Now().Before(stop) {
				id := prefix + strconv.FormatInt(seq.Add(1), 10)
				body := []byte(`{"id":"` + id + `","object":"event","type":"invoice.paid","data":{"object":{"id":"in_1","amount_due":2000,"currency":"usd","customer":"cus_bench"}}}` + strings.Repeat(" ", 160))
				t0 := time.Now()
				if !post(client, base, body) {
					errs.Add(1)
					continue
				}
				mine = append(mine, time.Since(t0))
			}
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if c, ok := store.(interface{ Close() }); ok {
		c.Close()
	}
	slices.Sort(lat)
	return Result{Name: name, Connections: conns, PerSecond: float64(len(lat)) / elapsed.Seconds(), Stored: int64(len(lat)),
		P50ms: percentileMs(lat, 0.50), P99ms: percentileMs(lat, 0.99), Errors: errs.Load()}, nil
}

// post sends one Stripe-signed webhook and reports whether it got its 200.
func post(client *http.Client, url string, body []byte) bool {
	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	req.Header = verify.SignStripe(stripeSecret, time.Now(), body)
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return false
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// percentileMs is the p-th quantile of sorted, in milliseconds (0 when empty).
func percentileMs(sorted []time.Duration, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	return float64(sorted[min(len(sorted)-1, int(p*float64(len(sorted))))].Microseconds()) / 1000
}
