package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/inlet-dev/inlet/consumers"
	"github.com/inlet-dev/inlet/consumers/bus"
	"github.com/inlet-dev/inlet/consumers/bus/natsbus"
	"github.com/inlet-dev/inlet/internal/database"
	"github.com/inlet-dev/inlet/internal/freeport"
	"github.com/inlet-dev/inlet/internal/natstest"
	"github.com/inlet-dev/inlet/schema"
	"github.com/inlet-dev/inlet/schema/queries"
	"github.com/inlet-dev/inlet/streamer"
)

var (
	jobsCount          = flag.Int("jobs", 20000, "jobs each measurement of the jobs section works through (Inlet per configuration, and River)")
	jobsConfigs        = flag.String("jobs-configs", "gochannel/1,gochannel/4,nats/1,nats/4", "jobs section: the Inlet configurations measured, bus/replicas, comma-separated")
	jobsRefsPerMessage = flag.Int("jobs-refs-per-message", 0, "jobs section: the streamer's refs_per_message (0: its default; 1: one reference per bus message, as before several per message)")
	jobsOrder          = flag.String("jobs-order", "", "jobs section: also measure ordered delivery per entity (order_key) over the in-process bus with one replica, for each comma-separated count of distinct keys (e.g. 10000,1; one key runs at most 500 jobs), against an unordered run just before")
	jobsHeld           = flag.Int("jobs-held", 0, "jobs section: also measure an unordered handler's burn-down over the in-process bus with one replica while an ordered handler has this many jobs of one key held back behind a dead letter (which each of its claims walks past), against an unordered run just before")
	jobsCold           = flag.Bool("jobs-cold", false, "jobs section: start the clock with the pools' connections not yet opened (before 2026-12-04 every run did), so each run also pays its backends' start-up and catalog loading, four replicas four times as much")
	jobsRLS            = flag.Bool("jobs-rls", false, "jobs section: measure each Inlet configuration twice, its consumers as webhook_worker and as a per-consumer role (inlet roles create-consumer), which row-level security holds to its handler")
)

// What each side runs with. The total handler concurrency is the same for
// every configuration, so one River figure compares with each: one Inlet
// replica runs it all, four split it evenly (as four processes would), and
// River's MaxWorkers equals it.
const (
	// jobsConcurrency is Inlet's total handler Concurrency (summed over the
	// replicas) and River's MaxWorkers.
	jobsConcurrency = 256
	// jobsStreamerBatch is the streamer's BatchSize (its default): jobs
	// leased and published per claim statement. The rest of the streamer's
	// Config is at its defaults too: MaxLeasedPerHandler 5000, FollowUp
	// 10ms for 100ms after the last round that leased, PollInterval 1s (no
	// LISTEN: the events are loaded in bulk, nothing sends NOTIFY).
	jobsStreamerBatch = 100
	// jobsConsumerConns is each replica's pool (TakeBatch and
	// CompleteBatch at their defaults, 64 and 128); jobsStreamerConns the
	// streamer's.
	jobsConsumerConns = 16
	jobsStreamerConns = 4
	// riverConns is River's pool: what one client needs for fetching,
	// completing in batches and its maintenance services.
	riverConns = 16
	// riverInsertBatch is how many jobs one InsertManyFast call (COPY) loads,
	// as river bench does with 5,000 per InsertMany.
	riverInsertBatch = 5000
	// jobsPoll is how often Inlet's measurement looks for jobs not yet
	// completed.
	jobsPoll = 20 * time.Millisecond
)

// JobsRun is one measurement of the jobs section: N jobs with a no-op
// handler, loaded before the clock starts, worked to completion.
type JobsRun struct {
	System string `json:"system"`
	// Bus is Inlet's transport: gochannel or nats (JetStream).
	Bus string `json:"bus,omitempty"`
	// Replicas is how many consumers.Service instances (each with its own
	// pool and, over NATS, its own connection) share the handler.
	Replicas int `json:"replicas,omitempty"`
	// Role is the consumers' database role, for Inlet: webhook_worker (every
	// handler), or "consumer role" (webhook_consumer_…, held to its handler
	// by row-level security; -jobs-rls).
	Role        string  `json:"role,omitempty"`
	Concurrency int     `json:"concurrency"`
	Jobs        int     `json:"jobs"`
	LoadSeconds float64 `json:"load_seconds"`
	Seconds     float64 `json:"seconds"`
	PerSecond   float64 `json:"per_second"`
	// VsRiver is PerSecond / the mean of River's two runs.
	VsRiver float64 `json:"vs_river,omitempty"`
	// OrderKeys is the distinct order keys of an ordered run (-jobs-order),
	// and VsUnordered its PerSecond / that of the unordered run before it.
	OrderKeys   int     `json:"order_keys,omitempty"`
	VsUnordered float64 `json:"vs_unordered,omitempty"`
	// HeldJobs is, for a run of -jobs-held, how many jobs another (ordered)
	// handler had held back meanwhile; VsUnordered is then its PerSecond /
	// that of the run before it, without them.
	HeldJobs int `json:"held_jobs,omitempty"`
	// VsWorker is PerSecond / that of the same configuration as
	// webhook_worker, for a run as a consumer role (-jobs-rls).
	VsWorker float64 `json:"vs_worker,omitempty"`
	// When is River's: "first" (before Inlet's runs) or "last" (after).
	When string `json:"when,omitempty"`
	// Statements per kind of write, for Inlet: claims (streamer), takes
	// (distinct job_attempts.started_at, each take statement's now()) and
	// completions (distinct xmin of the completed jobs). Jobs per statement
	// is how well each batches.
	Claims      int64 `json:"claim_statements,omitempty"`
	Takes       int64 `json:"take_statements,omitempty"`
	Completions int64 `json:"complete_statements,omitempty"`
	// The database's work from the clock's start (the jobs loaded) to the
	// last completion, per job.
	*Cost
}

// runJobs measures jobs completed per second with a no-op handler: Inlet with
// 1 and 4 consumer replicas over the in-process bus and over NATS JetStream,
// and River on the same cluster.
func runJobs(ctx context.Context, b *bench) (any, error) {
	n := *jobsCount
	if n < 1 {
		return nil, fmt.Errorf("-jobs: %d is not a positive count", n)
	}
	fmt.Println("River's CLI (river bench) cannot be installed here: the Go proxy does not serve github.com/riverqueue/river/cmd/river; River is measured through its library (river v0.51.2, riverpgxv5) the way river bench -n does.")
	nc, err := startNATSServer(ctx)
	if err != nil {
		return nil, err
	}
	defer nc.stop()

	// River runs first and last, so the ratio is against the mean of two
	// River runs around Inlet's on the same (noisy) machine.
	first, err := riverJobs(ctx, b, n)
	if err != nil {
		return nil, fmt.Errorf("river: %w", err)
	}
	first.When = "first"
	var runs []JobsRun
	roles := []bool{false}
	if *jobsRLS {
		roles = []bool{false, true}
	}
	configs := map[string]bool{}
	for c := range strings.SplitSeq(*jobsConfigs, ",") {
		configs[strings.TrimSpace(c)] = true
	}
	for _, kind := range []string{"gochannel", "nats"} {
		for _, replicas := range []int{1, 4} {
			if !configs[kind+"/"+strconv.Itoa(replicas)] {
				continue
			}
			var worker float64
			var rls []JobsRun
			for _, asConsumerRole := range roles {
				r, err := inletJobs(ctx, b, kind, nc.url, replicas, n, asConsumerRole, 0)
				if err != nil {
					return nil, fmt.Errorf("inlet over %s, %d replicas (%s): %w", kind, replicas, r.Role, err)
				}
				if asConsumerRole {
					rls = append(rls, r)
				} else {
					worker = r.PerSecond
					runs = append(runs, r)
				}
			}
			for _, r := range rls {
				r.VsWorker = r.PerSecond / worker
				runs = append(runs, r)
			}
		}
	}
	if *jobsOrder != "" {
		ordered, err := orderedJobs(ctx, b, n)
		if err != nil {
			return nil, err
		}
		runs = append(runs, ordered...)
	}
	if *jobsHeld > 0 {
		held, err := heldJobs(ctx, b, n, *jobsHeld)
		if err != nil {
			return nil, err
		}
		runs = append(runs, held...)
	}
	last, err := riverJobs(ctx, b, n)
	if err != nil {
		return nil, fmt.Errorf("river: %w", err)
	}
	last.When = "last"
	river := (first.PerSecond + last.PerSecond) / 2
	for i := range runs {
		runs[i].VsRiver = runs[i].PerSecond / river
	}
	first.VsRiver, last.VsRiver = first.PerSecond/river, last.PerSecond/river
	runs = append(runs, first, last)

	fmt.Printf("\n%d jobs each, no-op handler, loaded before the clock starts; total handler concurrency %d (River MaxWorkers %d); streamer batch %d:\n\n",
		n, jobsConcurrency, jobsConcurrency, jobsStreamerBatch)
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SYSTEM\tBUS\tREPLICAS\tROLE\tORDER KEYS\tJOBS\tLOAD S\tRUN S\tJOBS/S\t/ RIVER (MEAN)\t/ WORKER ROLE\t/ UNORDERED")
	for _, r := range runs {
		busName, replicas, role, vsWorker := "-", "-", "-", "-"
		if r.System == "inlet" {
			busName, replicas, role = r.Bus, strconv.Itoa(r.Replicas), r.Role
		} else {
			replicas = "(" + r.When + ")"
		}
		if r.VsWorker > 0 {
			vsWorker = fmt.Sprintf("%.2f×", r.VsWorker)
		}
		keys, vsUnordered := "-", "-"
		if r.OrderKeys > 0 {
			keys, vsUnordered = strconv.Itoa(r.OrderKeys), fmt.Sprintf("%.2f×", r.VsUnordered)
		}
		if r.HeldJobs > 0 {
			keys, vsUnordered = fmt.Sprintf("(%d held)", r.HeldJobs), fmt.Sprintf("%.2f×", r.VsUnordered)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%.1f\t%.2f\t%.0f\t%.2f×\t%s\t%s\n", r.System, busName, replicas, role, keys, r.Jobs, r.LoadSeconds, r.Seconds, r.PerSecond, r.VsRiver, vsWorker, vsUnordered)
	}
	tw.Flush()
	fmt.Println("\nWith 4 replicas both buses split the references among them: the in-process bus hands each to one subscriber of its topic, NATS to one member of the queue group, as separate processes would get them.")
	return runs, nil
}

// inletJobs loads n events that fan out to one job each for a fresh no-op
// handler, then starts that many consumer replicas and a streamer and times
// them until every job is completed. The consumers run as webhook_worker,
// or, asConsumerRole, as a consumer role made for the handler (as inlet
// roles create-consumer does), under row-level security.
func inletJobs(ctx context.Context, b *bench, kind, natsURL string, replicas, n int, asConsumerRole bool, orderKeys int) (run JobsRun, err error) {
	run = JobsRun{System: "inlet", Bus: kind, Replicas: replicas, Role: schema.WorkerRole, Concurrency: jobsConcurrency, Jobs: n, OrderKeys: orderKeys}
	if asConsumerRole {
		run.Role = "consumer role"
	}
	// Deferred first, so it runs last: after every service has stopped and
	// every pool is closed.
	var m *meter
	defer func() { err = finishMeter(ctx, m, &run, int64(n), err) }()
	name := fmt.Sprintf("bench-jobs-%s-%d-%d", kind, replicas, time.Now().UnixNano())
	owner, err := pgx.Connect(ctx, b.url)
	if err != nil {
		return run, err
	}
	defer owner.Close(ctx)
	// Only this measurement's handler gets jobs.
	if _, err := owner.Exec(ctx, `UPDATE webhook_ingress.subscriptions SET enabled = false`); err != nil {
		return run, err
	}
	role := schema.WorkerRole
	if asConsumerRole {
		role = fmt.Sprintf("webhook_consumer_bench_%d", time.Now().UnixNano())
		if _, err := queries.New(owner).CreateConsumerRole(ctx, queries.CreateConsumerRoleParams{Role: role, Handlers: []string{name},
			ScopeProviders: []string{"*"}, ScopeTypes: []string{"*"}}); err != nil {
			return run, fmt.Errorf("create consumer role: %w", err)
		}
		defer func() {
			if _, derr := queries.New(owner).DropConsumerRole(context.Background(), role); derr != nil && err == nil {
				err = fmt.Errorf("drop consumer role %s: %w", role, derr)
			}
		}()
	}

	// Everything the clock should not see is opened first: pools,
	// transports, the services (not started) and the subscription.
	var closers []func()
	defer func() {
		for _, c := range closers {
			c()
		}
	}()
	openBus := func(who string) (bus.PubSub, error) {
		if kind == "gochannel" {
			return nil, nil
		}
		// Closing a connection logs a warning meant for a lost server.
		quiet := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
		return natsbus.New(ctx, natsbus.Config{URL: natsURL, Name: "inlet-bench-" + who, Logger: quiet})
	}
	var shared bus.PubSub
	if kind == "gochannel" {
		// One process: the streamer and every replica share the
		// in-process bus, which hands each reference to one of a topic's
		// subscribers, as a NATS queue group does.
		shared = bus.NewGoChannel(b.log)
		closers = append(closers, func() { shared.Close() })
	}
	handler := consumers.Handler{Name: name, Provider: "stripe", Concurrency: jobsConcurrency / replicas,
		Func: func(context.Context, *consumers.Event) error { return nil }}
	if orderKeys > 0 {
		handler.OrderKey = "data.object.customer"
	}
	var services []*consumers.Service
	var pools []*pgxpool.Pool
	for i := range replicas {
		pool, err := database.Open(ctx, b.url, database.Options{Role: role, MaxConns: jobsConsumerConns,
			AppName: "inlet-bench-consumer-" + strconv.Itoa(i)})
		if err != nil {
			return run, err
		}
		closers = append(closers, pool.Close)
		pools = append(pools, pool)
		sub := shared
		if sub == nil {
			if sub, err = openBus("consumer-" + strconv.Itoa(i)); err != nil {
				return run, err
			}
			closers = append(closers, func() { sub.Close() })
		}
		s, err := consumers.New(consumers.Config{Pool: pool, Subscriber: sub, Handlers: []consumers.Handler{handler},
			WorkerID: "bench-jobs-" + strconv.Itoa(i), Logger: b.log})
		if err != nil {
			return run, err
		}
		services = append(services, s)
	}
	spool, err := database.Open(ctx, b.url, database.Options{Role: schema.StreamerRole, MaxConns: jobsStreamerConns, AppName: "inlet-bench-streamer"})
	if err != nil {
		return run, err
	}
	closers = append(closers, spool.Close)
	pub := shared
	if pub == nil {
		if pub, err = openBus("streamer"); err != nil {
			return run, err
		}
		closers = append(closers, func() { pub.Close() })
	}
	str, err := streamer.New(streamer.Config{Pool: spool, Publisher: pub, BatchSize: jobsStreamerBatch,
		RefsPerMessage: *jobsRefsPerMessage, Logger: b.log})
	if err != nil {
		return run, err
	}
	if err := services[0].Register(ctx); err != nil {
		return run, err
	}
	t0 := time.Now()
	events, err := loadEvents(ctx, owner, name, n, orderKeys)
	if err != nil {
		return run, err
	}
	run.LoadSeconds = time.Since(t0).Seconds()
	if m, err = b.startMeter(ctx, b.url); err != nil {
		return run, err
	}

	if !*jobsCold {
		for _, p := range append(pools, spool) {
			if err := warmPool(ctx, p, inletWarmQuery); err != nil {
				return run, err
			}
		}
	}
	start := time.Now()
	for _, s := range services {
		if err := s.Start(ctx); err != nil {
			return run, err
		}
		defer func() {
			if err := s.Stop(context.Background()); err != nil {
				b.log.Warn("stop consumer service", slog.String("error", err.Error()))
			}
		}()
	}
	if err := str.Start(ctx); err != nil {
		return run, err
	}
	defer str.Stop()
	end, err := waitCompleted(ctx, owner, name, events, n)
	if err != nil {
		return run, err
	}
	run.Seconds = end.Sub(start).Seconds()
	run.PerSecond = float64(n) / run.Seconds
	run.Claims = int64(str.Stats().Claims)
	if err := owner.QueryRow(ctx, `/* bench-monitor */ SELECT
		(SELECT count(DISTINCT a.started_at) FROM webhook_ingress.job_attempts a JOIN webhook_ingress.jobs j
			ON j.id = a.job_id AND j.event_received_at = a.event_received_at WHERE j.handler = $1),
		(SELECT count(DISTINCT xmin::text) FROM webhook_ingress.jobs WHERE handler = $1 AND status = 'completed')`, name).Scan(&run.Takes, &run.Completions); err != nil {
		return run, fmt.Errorf("count the statements of %s: %w", name, err)
	}
	// Since protocol 010 a success leaves no job_attempts row, so there are
	// no takes to count ("-"); the statements below say what each job cost.
	per := func(k int64) string {
		if k == 0 {
			return "-"
		}
		return strconv.FormatFloat(float64(n)/float64(k), 'f', 1, 64)
	}
	fmt.Printf("inlet over %s, %d replica(s) × concurrency %d as %s: %d jobs in %.2fs, %.0f/s; jobs per statement: claim %s, take %s, complete %s\n",
		kind, replicas, handler.Concurrency, run.Role, n, run.Seconds, run.PerSecond, per(run.Claims), per(run.Takes), per(run.Completions))
	return run, nil
}

// finishMeter measures the cost of a jobs run whose meter m started (nil:
// it did not get that far) once the run returned err, and prints it.
func finishMeter(ctx context.Context, m *meter, run *JobsRun, jobs int64, err error) error {
	if m == nil {
		return err
	}
	if err != nil {
		m.close()
		return err
	}
	if run.Cost, err = m.finish(ctx, jobs); err != nil {
		return err
	}
	run.Cost.print("  ")
	return nil
}

// eventRange is the ids of the events one measurement loaded.
type eventRange struct{ lo, hi int64 }

// loadEvents stores n Stripe events in one statement as the owner; the
// fan-out trigger gives each a pending job for handler, the only enabled
// subscription. With keys > 0 each also gets its parsed payload, whose
// data.object.customer is one of keys customers (an ordered handler's key). The jobs table is then vacuumed and analyzed, so each
// measurement starts from the same state (river bench vacuums its table).
func loadEvents(ctx context.Context, owner *pgx.Conn, handler string, n, keys int) (eventRange, error) {
	var r eventRange
	var stored int
	err := owner.QueryRow(ctx, `
		WITH ins AS (
		    INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, event_type, raw_body, payload, signature_verified, secret_index)
		    SELECT 'stripe', 'stripe', $1 || '-' || g, 'invoice.paid', convert_to(b.body, 'UTF8'),
		           CASE WHEN $3::int > 0 THEN b.body::jsonb END, true, 0
		    FROM generate_series(1, $2::int) g,
		         LATERAL (SELECT '{"id":"evt_' || g || '","object":"event","type":"invoice.paid","data":{"object":{"id":"in_' || g
		                         || '","amount_due":2000,"currency":"usd","customer":"cus_'
		                         || CASE WHEN $3::int > 0 THEN (g % $3::int)::text ELSE 'bench' END
		                         || '"}}}' || repeat(' ', 160) AS body) b
		    RETURNING id
		)
		SELECT count(*), coalesce(min(id), 0), coalesce(max(id), 0) FROM ins`, handler, n, keys).Scan(&stored, &r.lo, &r.hi)
	if err != nil {
		return r, fmt.Errorf("load %d events: %w", n, err)
	}
	if stored != n {
		return r, fmt.Errorf("loaded %d events, want %d", stored, n)
	}
	jobs, err := countJobs(ctx, owner, handler, r, "pending")
	if err != nil {
		return r, err
	}
	if jobs != n {
		return r, fmt.Errorf("%d events fanned out to %d pending jobs of %s, want %d", n, jobs, handler, n)
	}
	if _, err := owner.Exec(ctx, `VACUUM (ANALYZE) webhook_ingress.events, webhook_ingress.jobs, webhook_ingress.job_attempts`); err != nil {
		return r, fmt.Errorf("vacuum: %w", err)
	}
	return r, reportStats(ctx, owner)
}

// countJobs counts handler's jobs of the events in r with status (by the
// event/handler key, not a scan of every job a run has left behind).
func countJobs(ctx context.Context, owner *pgx.Conn, handler string, r eventRange, status string) (int, error) {
	var n int
	err := owner.QueryRow(ctx, `/* bench-monitor */ SELECT count(*) FROM webhook_ingress.jobs
		WHERE event_id BETWEEN $1 AND $2 AND handler = $3 AND status = $4`, r.lo, r.hi, handler, status).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count %s jobs of %s: %w", status, handler, err)
	}
	return n, nil
}

// waitCompleted returns when every one of handler's n jobs is completed.
// Every jobsPoll it asks whether any is left unfinished (pending, failed or
// leased), which reads the first entry of two small partial indexes: a
// count(*) of the completed ones would read a row per job worked so far,
// and on this 2-core machine that polling would take a good share of the
// CPU Postgres gives the system measured. At none left it checks that all n
// are completed. The time returned is that of the poll that found none.
func waitCompleted(ctx context.Context, owner *pgx.Conn, handler string, r eventRange, n int) (time.Time, error) {
	deadline := time.Now().Add(time.Minute + 10*time.Duration(n)*time.Millisecond)
	for {
		var left bool
		err := owner.QueryRow(ctx, `/* bench-monitor */ SELECT
			EXISTS (SELECT FROM webhook_ingress.jobs WHERE status IN ('pending', 'failed') AND handler = $1) OR
			EXISTS (SELECT FROM webhook_ingress.jobs WHERE status = 'leased' AND handler = $1)`, handler).Scan(&left)
		if err != nil {
			return time.Time{}, fmt.Errorf("look for unfinished jobs of %s: %w", handler, err)
		}
		now := time.Now()
		if !left {
			done, err := countJobs(ctx, owner, handler, r, "completed")
			if err != nil {
				return time.Time{}, err
			}
			if done != n {
				return time.Time{}, fmt.Errorf("%d of %d jobs of the no-op handler %s completed, none left to run", done, n, handler)
			}
			return now, nil
		}
		if now.After(deadline) {
			done, _ := countJobs(ctx, owner, handler, r, "completed")
			return time.Time{}, fmt.Errorf("%d of %d jobs of %s completed at the deadline", done, n, handler)
		}
		time.Sleep(jobsPoll)
	}
}

// riverArgs is the no-op job River works.
type riverArgs struct {
	Num int `json:"num"`
}

func (riverArgs) Kind() string { return "inlet_bench_noop" }

type riverWorker struct {
	river.WorkerDefaults[riverArgs]
}

func (riverWorker) Work(context.Context, *river.Job[riverArgs]) error { return nil }

// riverJobs is river bench's fixed-count mode (-n) through River's library:
// River's schema migrated into its own schema of the same database, its jobs
// table emptied and vacuumed, n jobs inserted in batches before the client
// starts (then vacuumed and analyzed, as Inlet's jobs are), a client with river bench's fetch settings (FetchCooldown 2ms,
// FetchPollInterval 20ms) and MaxWorkers jobsConcurrency, timed from Start
// to the last job's completed event on a subscription.
func riverJobs(ctx context.Context, b *bench, n int) (run JobsRun, err error) {
	run = JobsRun{System: "river", Concurrency: jobsConcurrency, Jobs: n}
	var m *meter // see inletJobs
	defer func() { err = finishMeter(ctx, m, &run, int64(n), err) }()
	pcfg, err := pgxpool.ParseConfig(b.url)
	if err != nil {
		return run, err
	}
	pcfg.MaxConns = riverConns
	pcfg.ConnConfig.RuntimeParams["application_name"] = "inlet-bench-river"
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return run, err
	}
	defer pool.Close()
	const schemaName = "river_bench"
	if _, err := pool.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS `+schemaName); err != nil {
		return run, err
	}
	driver := riverpgxv5.New(pool)
	quiet := slog.New(slog.DiscardHandler)
	migrator, err := rivermigrate.New(driver, &rivermigrate.Config{Schema: schemaName, Logger: quiet})
	if err != nil {
		return run, err
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return run, fmt.Errorf("migrate River's schema: %w", err)
	}
	if _, err := pool.Exec(ctx, `TRUNCATE `+schemaName+`.river_job`); err != nil {
		return run, err
	}
	if _, err := pool.Exec(ctx, `VACUUM FULL `+schemaName+`.river_job`); err != nil {
		return run, err
	}

	workers := river.NewWorkers()
	river.AddWorker(workers, riverWorker{})
	client, err := river.NewClient(driver, &river.Config{
		Schema:            schemaName,
		FetchCooldown:     2 * time.Millisecond,
		FetchPollInterval: 20 * time.Millisecond,
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: jobsConcurrency}},
		Workers:           workers,
		Logger:            b.log,
	})
	if err != nil {
		return run, err
	}
	t0 := time.Now()
	if err := loadRiverJobs(ctx, b.url, client, schemaName, n); err != nil {
		return run, err
	}
	run.LoadSeconds = time.Since(t0).Seconds()
	if m, err = b.startMeter(ctx, b.url); err != nil {
		return run, err
	}

	// As river bench: the completed events say when a job is done, since
	// they come after River's completer recorded it, and the channel holds
	// every one so none is dropped.
	events, cancel := client.SubscribeConfig(&river.SubscribeConfig{ChanSize: n,
		Kinds: []river.EventKind{river.EventKindJobCompleted, river.EventKindJobFailed, river.EventKindJobCancelled}})
	defer cancel()
	if !*jobsCold {
		if err := warmPool(ctx, pool, `SELECT 1 FROM `+schemaName+`.river_job WHERE id = -1`); err != nil {
			return run, err
		}
	}
	start := time.Now()
	if err := client.Start(ctx); err != nil {
		return run, err
	}
	defer func() {
		if err := client.Stop(context.Background()); err != nil {
			b.log.Warn("stop River client", slog.String("error", err.Error()))
		}
	}()
	var last time.Time
	timeout := time.After(time.Minute + 10*time.Duration(n)*time.Millisecond)
	for done := 0; done < n; {
		select {
		case e, ok := <-events:
			if !ok {
				return run, errors.New("the subscription to River's events closed")
			}
			if e.Kind != river.EventKindJobCompleted {
				return run, fmt.Errorf("job %d in River: %s, want completed", e.Job.ID, e.Kind)
			}
			done++
			last = time.Now()
		case <-timeout:
			return run, fmt.Errorf("%d of %d River jobs completed before the deadline", done, n)
		}
	}
	run.Seconds = last.Sub(start).Seconds()
	run.PerSecond = float64(n) / run.Seconds
	var completed int
	if err := pool.QueryRow(ctx, `/* bench-monitor */ SELECT count(*) FROM `+schemaName+`.river_job WHERE state = 'completed'`).Scan(&completed); err != nil {
		return run, err
	}
	if completed != n {
		return run, fmt.Errorf("completed jobs: River reported %d, its table has %d", n, completed)
	}
	fmt.Printf("river, MaxWorkers %d: %d jobs in %.2fs, %.0f/s\n", jobsConcurrency, n, run.Seconds, run.PerSecond)
	return run, nil
}

// loadRiverJobs inserts n jobs in batches of riverInsertBatch (COPY, as
// river bench's InsertMany) and vacuums and analyzes the table, on a
// connection of its own whose statistics are reported before it returns, so
// the measurement's first reading of them already holds the load.
func loadRiverJobs(ctx context.Context, url string, client *river.Client[pgx.Tx], schemaName string, n int) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	params := make([]river.InsertManyParams, 0, riverInsertBatch)
	for i := 0; i < n; i += riverInsertBatch {
		params = params[:0]
		for j := i; j < min(n, i+riverInsertBatch); j++ {
			params = append(params, river.InsertManyParams{Args: riverArgs{Num: j}})
		}
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			_, err := client.InsertManyFastTx(ctx, tx, params)
			return err
		})
		if err != nil {
			return fmt.Errorf("insert River jobs: %w", err)
		}
	}
	if _, err := conn.Exec(ctx, `VACUUM (ANALYZE) `+schemaName+`.river_job`); err != nil {
		return fmt.Errorf("vacuum River's jobs: %w", err)
	}
	return reportStats(ctx, conn)
}

// natsServer is a JetStream-enabled nats-server process built from the
// module the project pins as a tool.
type natsServer struct {
	*process
	url string
	dir string
}

func startNATSServer(ctx context.Context) (*natsServer, error) {
	bin, err := natstest.Binary()
	if err != nil {
		return nil, err
	}
	port, err := freeport.Pick()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "inlet-bench-nats-")
	if err != nil {
		return nil, err
	}
	p, err := startProcess(exec.Command(bin, "-a", "127.0.0.1", "-p", strconv.Itoa(port), "-js", "-sd", dir), filepath.Join(dir, "server.log"))
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("nats-server: %w", err)
	}
	s := &natsServer{process: p, url: "nats://127.0.0.1:" + strconv.Itoa(port), dir: dir}
	deadline := time.Now().Add(30 * time.Second)
	for {
		conn, err := nats.Connect(s.url, nats.Timeout(time.Second))
		if err == nil {
			var js nats.JetStreamContext
			if js, err = conn.JetStream(); err == nil {
				_, err = js.AccountInfo(nats.Context(ctx))
			}
			conn.Close()
			if err == nil {
				return s, nil
			}
		}
		select {
		case <-s.done:
			out, _ := os.ReadFile(s.log)
			os.RemoveAll(dir)
			return nil, fmt.Errorf("nats-server exited at start:\n%s", out)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.stop()
			return nil, fmt.Errorf("nats-server not ready after 30s: %w", err)
		}
	}
}

// stop shuts the server down (SIGTERM, then SIGKILL after 10s) and removes
// its store; the built binary stays for the next section (run removes it).
func (s *natsServer) stop() {
	s.terminate(10 * time.Second)
	os.RemoveAll(s.dir)
}

// orderedJobs measures, over the in-process bus with one replica, an
// unordered run and then one ordered run per -jobs-order count of distinct
// keys (one key: the jobs run one at a time, so at most 500 of them, which
// finish within waitCompleted's deadline at ~10 jobs/s).
func orderedJobs(ctx context.Context, b *bench, n int) ([]JobsRun, error) {
	var runs []JobsRun
	for spec := range strings.SplitSeq(*jobsOrder, ",") {
		keys, err := strconv.Atoi(strings.TrimSpace(spec))
		if err != nil || keys < 1 {
			return nil, fmt.Errorf("-jobs-order: %q is not a positive count of keys", spec)
		}
		jobs := n
		if keys == 1 {
			jobs = min(n, 500)
		}
		base, err := inletJobs(ctx, b, "gochannel", "", 1, jobs, false, 0)
		if err != nil {
			return nil, fmt.Errorf("inlet unordered before %d keys: %w", keys, err)
		}
		r, err := inletJobs(ctx, b, "gochannel", "", 1, jobs, false, keys)
		if err != nil {
			return nil, fmt.Errorf("inlet ordered, %d keys: %w", keys, err)
		}
		r.VsUnordered = r.PerSecond / base.PerSecond
		runs = append(runs, base, r)
	}
	return runs, nil
}

// heldJobs measures, over the in-process bus with one replica, an unordered
// run, then held jobs of another handler, ordered, all of one key behind its
// dead-lettered head (order_policy block: they wait until an operator
// replays it, and stay due, so each claim of that handler walks past them),
// then the unordered run again. Before 031 every claim walked past them.
// The held jobs are completed afterwards, so later runs do not see them.
func heldJobs(ctx context.Context, b *bench, n, held int) ([]JobsRun, error) {
	base, err := inletJobs(ctx, b, "gochannel", "", 1, n, false, 0)
	if err != nil {
		return nil, fmt.Errorf("inlet unordered before %d held: %w", held, err)
	}
	owner, err := pgx.Connect(ctx, b.url)
	if err != nil {
		return nil, err
	}
	defer owner.Close(ctx)
	name := fmt.Sprintf("bench-held-%d", time.Now().UnixNano())
	t0 := time.Now()
	for _, q := range []string{
		`UPDATE webhook_ingress.subscriptions SET enabled = false`,
		`INSERT INTO webhook_ingress.subscriptions (handler, provider_pattern, event_type_pattern, order_key) VALUES ($1, 'stripe', 'held.*', 'data.object.customer')`,
		`INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, event_type, raw_body, payload, signature_verified, secret_index)
		 SELECT 'stripe', 'stripe', $1 || '-' || g, 'held.backlog', convert_to(b.body, 'UTF8'), b.body::jsonb, true, 0
		 FROM generate_series(1, $2::int) g, LATERAL (SELECT '{"id":"evt_' || g || '","data":{"object":{"customer":"cus_held"}}}' AS body) b`,
		`UPDATE webhook_ingress.jobs SET status = 'dead_letter', lease_expires_at = NULL
		 WHERE id = (SELECT min(id) FROM webhook_ingress.jobs WHERE handler = $1)`,
		`VACUUM (ANALYZE) webhook_ingress.jobs`,
	} {
		var args []any
		switch {
		case strings.Contains(q, "$2"):
			args = []any{name, held}
		case strings.Contains(q, "$1"):
			args = []any{name}
		}
		if _, err := owner.Exec(ctx, q, args...); err != nil {
			return nil, fmt.Errorf("hold %d jobs back: %w", held, err)
		}
	}
	b.log.Info("held jobs loaded", slog.Int("jobs", held), slog.Duration("took", time.Since(t0)))
	r, err := inletJobs(ctx, b, "gochannel", "", 1, n, false, 0)
	if _, cerr := owner.Exec(ctx, `UPDATE webhook_ingress.jobs SET status = 'completed', completed_at = now() WHERE handler = $1 AND status <> 'completed'`, name); cerr != nil && err == nil {
		err = fmt.Errorf("complete the held jobs: %w", cerr)
	}
	if err != nil {
		return nil, fmt.Errorf("inlet unordered beside %d held: %w", held, err)
	}
	r.HeldJobs, r.VsUnordered = held, r.PerSecond/base.PerSecond
	return []JobsRun{base, r}, nil
}

// inletWarmQuery plans a read of jobs and events, which loads every
// partition's and index's catalog entries into the backend, as a running
// service's backends have them.
const inletWarmQuery = `SELECT 1 FROM webhook_ingress.jobs j JOIN webhook_ingress.events e
	ON e.id = j.event_id AND e.received_at = j.event_received_at WHERE j.id = -1`

// warmPool opens every connection pool may hold and runs query on each, so
// the measurement starts with the backends a running service would have
// (started, their catalog caches loaded) rather than paying for them
// inside the timed window: a cost a long-running service pays once, which
// a run of a few seconds would count once per backend, four replicas four
// times as often as one. Statements' plans are still made on first use.
func warmPool(ctx context.Context, pool *pgxpool.Pool, query string) error {
	var conns []*pgxpool.Conn
	defer func() {
		for _, c := range conns {
			c.Release()
		}
	}()
	for range pool.Config().MaxConns {
		c, err := pool.Acquire(ctx)
		if err != nil {
			return fmt.Errorf("warm the pool: %w", err)
		}
		conns = append(conns, c)
		if _, err := c.Exec(ctx, query); err != nil {
			return fmt.Errorf("warm the pool: %w", err)
		}
	}
	return nil
}
