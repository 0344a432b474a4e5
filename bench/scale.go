package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inlet-dev/inlet/consumers"
	"github.com/inlet-dev/inlet/ingress/verify"
	"github.com/inlet-dev/inlet/internal/database"
	"github.com/inlet-dev/inlet/schema"
	"github.com/inlet-dev/inlet/schema/queries"
	"github.com/inlet-dev/inlet/streamer"
)

var (
	scaleSizes     = flag.String("scale-sizes", "0,1000000,10000000", "finished jobs in the table at each claim measurement of the scale section, comma-separated")
	scaleRunEvents = flag.Int("scale-run-events", 1000000, "events the scale section drives through their whole lifecycle before it reports table sizes")
	scaleRounds    = flag.Int("scale-rounds", 200, "timed claims (and lookups by id) at each size of the scale section")
)

const (
	// fillHandlers is how many handlers each filled event fans out to, so a
	// size of N finished jobs is N/2 events.
	fillHandlers = 2
	// fillChunk is how many events one fill statement inserts.
	fillChunk = 100_000
	// fillWeeks is how far back the filled events go: 90-day retention on
	// weekly partitions.
	fillWeeks = 13
	// dueJobs is how many jobs are due at each claim: the streamer's batch.
	dueJobs = 100
	// runBatch is how many events one InsertEvents statement of the
	// lifecycle run stores (a full group commit).
	runBatch = 500
	// runBacklog bounds the jobs inserted but not yet completed, so the run
	// is a steady hot queue rather than insert-everything-then-drain.
	runBacklog = 20_000
)

// ScaleReport is what the scale section saves.
type ScaleReport struct {
	Claims []ClaimAtSize `json:"claims"`
	// Plans are at the largest size.
	Plans *Plans        `json:"plans"`
	Run   *LifecycleRun `json:"run,omitempty"`
}

// Plans are EXPLAIN (ANALYZE, BUFFERS) of the statements timed.
type Plans struct {
	// Claim is the plan of the statement ClaimJobs runs inside
	// webhook_ingress.claim_jobs (its generic plan, as the streamer runs
	// it: 022_protocol_functions), as auto_explain printed it with the
	// streamer's parameters.
	Claim string `json:"claim"`
	ByID  string `json:"by_id"`
}

// ClaimAtSize is the claim latency with Finished completed jobs in the table.
type ClaimAtSize struct {
	Finished    int64   `json:"finished_jobs"`
	Events      int64   `json:"events"`
	Partitions  int     `json:"jobs_partitions"`
	FillSeconds float64 `json:"fill_seconds"`
	// VacuumSeconds is VACUUM (ANALYZE) of every partition after the fill,
	// as autovacuum would eventually do (partitioned parents are never
	// analyzed by autovacuum, so they are not here either).
	VacuumSeconds float64 `json:"vacuum_seconds"`
	Rounds        int     `json:"rounds"`
	// Short is how many timed claims leased fewer than dueJobs jobs.
	Short    int     `json:"short_claims"`
	ClaimP50 float64 `json:"claim_p50_ms"`
	ClaimP99 float64 `json:"claim_p99_ms"`
	ClaimMax float64 `json:"claim_max_ms"`
	// EmptyP50 and EmptyP99 are the same claim timed alternately with
	// these rounds in a twin database whose jobs table holds no finished
	// job; RatioP50 and RatioP99 are against them.
	EmptyP50 float64 `json:"empty_claim_p50_ms,omitempty"`
	EmptyP99 float64 `json:"empty_claim_p99_ms,omitempty"`
	RatioP50 float64 `json:"p50_vs_empty,omitempty"`
	RatioP99 float64 `json:"p99_vs_empty,omitempty"`
	// ClaimBuffers is the shared buffers one claim touched (EXPLAIN
	// ANALYZE, BUFFERS), EmptyBuffers the same in the empty twin: a cost
	// the machine's load does not move.
	ClaimBuffers int64   `json:"claim_buffers"`
	EmptyBuffers int64   `json:"empty_claim_buffers,omitempty"`
	ClaimExecMs  float64 `json:"claim_explain_execution_ms"`
	ByIDP50      float64 `json:"by_id_p50_ms"`
	ByIDP99      float64 `json:"by_id_p99_ms"`
	EmptyByIDP50 float64 `json:"empty_by_id_p50_ms,omitempty"`
	HeapBytes    int64   `json:"jobs_heap_bytes"`
	IdxBytes     int64   `json:"jobs_index_bytes"`
}

// LifecycleRun is a run of events through ingest, claim, take and complete
// with the real statements and roles, and the tables it left.
type LifecycleRun struct {
	Events    int     `json:"events"`
	Seconds   float64 `json:"seconds"`
	PerSecond float64 `json:"events_per_second"`
	// MaxBacklog is the most jobs seen inserted and not yet completed.
	MaxBacklog int64             `json:"max_backlog"`
	Tables     []TableSize       `json:"tables"`
	Timeline   []RunSample       `json:"timeline"`
	Settings   map[string]string `json:"settings"`
	// ClaimAfter is the claim latency measured on the run's tables after
	// it, with its plans.
	ClaimAfter      *ClaimAtSize `json:"claim_after,omitempty"`
	ClaimAfterPlans *Plans       `json:"claim_after_plans,omitempty"`
	// ClaimVacuumed is the same after VACUUM (ANALYZE) of every partition.
	ClaimVacuumed *ClaimAtSize `json:"claim_vacuumed,omitempty"`
}

// RunSample is the run and its jobs partitions every 10s.
type RunSample struct {
	Seconds         float64 `json:"seconds"`
	Completed       int64   `json:"completed"`
	InFlight        int64   `json:"in_flight"`
	JobsDead        int64   `json:"jobs_n_dead_tup"`
	JobsAutovacuums int64   `json:"jobs_autovacuum_count"`
	JobsBytes       int64   `json:"jobs_total_bytes"`
	ClaimableBytes  int64   `json:"idx_jobs_claimable_bytes"`
}

// jobsSampleSQL is the jobs partitions' dead tuples, autovacuum runs, size
// with indexes, and the claimable index's size.
const jobsSampleSQL = `
SELECT coalesce(sum(s.n_dead_tup), 0)::bigint, coalesce(sum(s.autovacuum_count), 0)::bigint,
       coalesce(sum(pg_total_relation_size(p.relid)), 0)::bigint,
       (SELECT coalesce(sum(pg_relation_size(x.relid)), 0)::bigint
        FROM pg_partition_tree('webhook_ingress.idx_jobs_claimable') x WHERE x.isleaf)
FROM pg_partition_tree('webhook_ingress.jobs') p
LEFT JOIN pg_stat_user_tables s ON s.relid = p.relid
WHERE p.isleaf`

// TableSize is one table summed over its partitions.
type TableSize struct {
	Table        string      `json:"table"`
	Partitions   int         `json:"partitions"`
	HeapBytes    int64       `json:"heap_bytes"` // pg_table_size: heap, TOAST, FSM, VM
	IndexBytes   int64       `json:"index_bytes"`
	LiveTuples   int64       `json:"n_live_tup"`
	DeadTuples   int64       `json:"n_dead_tup"`
	Updates      int64       `json:"n_tup_upd"`
	HotUpdates   int64       `json:"n_tup_hot_upd"`
	Autovacuums  int64       `json:"autovacuum_count"`
	Autoanalyzes int64       `json:"autoanalyze_count"`
	Indexes      []IndexSize `json:"indexes"`
}

// IndexSize is one index of a table, summed over its partitions.
type IndexSize struct {
	Name  string `json:"name"`
	Bytes int64  `json:"bytes"`
}

// runScale measures how claiming scales with the finished jobs a table
// holds, and what a long run of the real lifecycle leaves in the tables.
func runScale(ctx context.Context, b *bench) (any, error) {
	var sizes []int64
	for _, s := range strings.Split(*scaleSizes, ",") {
		n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("-scale-sizes: %q is not a list of job counts", *scaleSizes)
		}
		sizes = append(sizes, n)
	}
	slices.Sort(sizes)
	sizes = slices.Compact(sizes)
	if *scaleRounds < 1 || *scaleRunEvents < 0 {
		return nil, errors.New("-scale-rounds must be positive and -scale-run-events not negative")
	}
	rep := &ScaleReport{}
	if err := scaleClaims(ctx, b, sizes, rep); err != nil {
		return nil, err
	}
	printClaims(rep.Claims)
	if *scaleRunEvents > 0 {
		run, err := scaleRun(ctx, b, *scaleRunEvents)
		if err != nil {
			return nil, err
		}
		rep.Run = run
		printRun(run)
	}
	return rep, nil
}

// scratchDatabase creates database name afresh, migrated, so this section's
// rows neither meet nor skew the other sections'. Roles are cluster-wide and
// already exist.
func scratchDatabase(ctx context.Context, b *bench, name string) (string, error) {
	conn, err := pgx.Connect(ctx, b.url)
	if err != nil {
		return "", err
	}
	defer conn.Close(ctx)
	id := pgx.Identifier{name}.Sanitize()
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+id); err != nil {
		return "", fmt.Errorf("drop database %s: %w", name, err)
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+id); err != nil {
		return "", fmt.Errorf("create database %s: %w", name, err)
	}
	url := b.cluster.URL(name)
	db, err := pgx.Connect(ctx, url)
	if err != nil {
		return "", err
	}
	defer db.Close(ctx)
	if _, err := schema.Migrate(ctx, db); err != nil {
		return "", fmt.Errorf("migrate database %s: %w", name, err)
	}
	return url, nil
}

// scaleClaims fills one database up to each size in turn and measures the
// claim there, round by round alternately with the same claim in a twin
// database left empty, so the ratio is taken under the same load (other
// work on the machine moves both).
func scaleClaims(ctx context.Context, b *bench, sizes []int64, rep *ScaleReport) error {
	var urls [2]string
	var owners [2]*pgx.Conn
	for i, name := range []string{"inlet_scale_claim", "inlet_scale_empty"} {
		url, err := scratchDatabase(ctx, b, name)
		if err != nil {
			return err
		}
		owner, err := pgx.Connect(ctx, url)
		if err != nil {
			return err
		}
		defer owner.Close(ctx)
		if err := weeklyPartitions(ctx, owner); err != nil {
			return err
		}
		urls[i], owners[i] = url, owner
	}
	full, empty := owners[0], owners[1]
	var filled int64 // finished jobs so far
	events := int64(0)
	for i, size := range sizes {
		t0 := time.Now()
		if size > filled {
			n := (size - filled + fillHandlers - 1) / fillHandlers
			if err := fill(ctx, urls[0], events, n); err != nil {
				return err
			}
			events += n
			filled += n * fillHandlers
		}
		fillTook := time.Since(t0)
		t0 = time.Now()
		if err := vacuumPartitions(ctx, full); err != nil {
			return err
		}
		vacTook := time.Since(t0)
		if err := vacuumPartitions(ctx, empty); err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "scale: %d finished jobs (%d events) filled in %s, vacuumed in %s\n",
			filled, events, fillTook.Round(time.Second), vacTook.Round(time.Second))
		tag := fmt.Sprintf("l%d", i)
		c, plans, err := measureClaim(ctx, urls[0], full, urls[1], empty, *scaleRounds, tag)
		if err != nil {
			return fmt.Errorf("claim at %d finished jobs: %w", size, err)
		}
		c.Finished, c.Events, c.FillSeconds, c.VacuumSeconds = filled, events, fillTook.Seconds(), vacTook.Seconds()
		rep.Claims = append(rep.Claims, c)
		rep.Plans = plans // the largest size's are kept
		if i == len(sizes)-1 {
			printPlans(fmt.Sprintf("at %d finished jobs", filled), plans)
		}
		filled += dueJobs // measureClaim finishes its due jobs
		events += dueJobs / fillHandlers
	}
	return nil
}

// weeklyPartitions gives a fresh database weekly partitions for fillWeeks
// weeks back and 4 ahead, as one kept 90 days has: the migration made the
// current week and 4 ahead (still empty); they are dropped the way
// retention drops them and the periods created again from fillWeeks back
// with the schema's own create_partitions. It also adds the fill's
// subscriptions, off.
func weeklyPartitions(ctx context.Context, owner *pgx.Conn) error {
	if _, err := owner.Exec(ctx, `SELECT count(*) FROM webhook_ingress.partitions() p, webhook_ingress.drop_partition(p.period_start) d`); err != nil {
		return fmt.Errorf("drop the migration's partitions: %w", err)
	}
	if _, err := owner.Exec(ctx, `SELECT count(*) FROM webhook_ingress.create_partitions('week', 4, now() - $1::interval)`,
		time.Duration(fillWeeks)*7*24*time.Hour); err != nil {
		return fmt.Errorf("create partitions: %w", err)
	}
	return addFillSubscriptions(ctx, owner)
}

func addFillSubscriptions(ctx context.Context, owner *pgx.Conn) error {
	_, err := owner.Exec(ctx, `INSERT INTO webhook_ingress.subscriptions (handler, provider_pattern, enabled)
		SELECT 'scale-' || h, 'stripe', false FROM generate_series(1, $1::int) h`, fillHandlers)
	return err
}

// fillSQL inserts events $1..$2-1 (as webhooks arriving evenly from $3 to
// $4) and for each a finished job per handler in $5, in one statement.
const fillSQL = `
WITH ev AS (
    INSERT INTO webhook_ingress.events
        (provider, scheme, external_event_id, event_type, received_at, headers, request_uri, raw_body, signature_verified, secret_index)
    SELECT 'stripe', 'stripe', 'evt_fill_' || g, 'invoice.paid',
           $3::timestamptz + ($4::timestamptz - $3::timestamptz) * ((g - $1)::float8 / ($2 - $1)),
           jsonb_build_object('Content-Type', jsonb_build_array('application/json'),
                              'User-Agent', jsonb_build_array('Stripe/1.0 (+https://stripe.com/docs/webhooks)'),
                              'Stripe-Signature', jsonb_build_array('t=1764700000,v1=' || md5(g::text) || md5(g::text || 's'))),
           '/webhooks/stripe',
           convert_to('{"id":"evt_fill_' || g || '","object":"event","type":"invoice.paid","data":{"object":{"id":"in_' || g
                      || '","amount_due":2000,"currency":"usd","customer":"cus_bench"}}}' || repeat(' ', 160), 'UTF8'),
           true, 0
    FROM generate_series($1::bigint, $2::bigint - 1) g
    RETURNING id, received_at, provider, event_type
)
INSERT INTO webhook_ingress.jobs
    (event_id, event_received_at, handler, provider, event_type, status, attempt_count, max_attempts,
     next_attempt_at, attempted_at, worker_id, created_at, updated_at, completed_at)
SELECT ev.id, ev.received_at, h.handler, ev.provider, ev.event_type, 'completed', 1, 25,
       ev.received_at, ev.received_at + interval '15 ms', 'scale-fill', ev.received_at,
       ev.received_at + interval '40 ms', ev.received_at + interval '40 ms'
FROM ev CROSS JOIN unnest($5::text[]) AS h(handler)`

// fill adds n events numbered from first, each with fillHandlers completed
// jobs, spread over the last fillWeeks weeks in time order, on two
// connections. The dedupe trigger still claims every event's key; the jobs'
// foreign key check is skipped (session_replication_role, as pg_restore
// does): each job is made from the event the same statement inserted.
func fill(ctx context.Context, url string, first, n int64) error {
	var handlers []string
	for h := 1; h <= fillHandlers; h++ {
		handlers = append(handlers, "scale-"+strconv.Itoa(h))
	}
	now := time.Now()
	from := now.Add(-time.Duration(fillWeeks) * 7 * 24 * time.Hour).Add(time.Hour)
	to := now.Add(-10 * time.Minute)
	span := to.Sub(from)
	chunks := make(chan int64)
	errs := make(chan error, 2)
	var wg sync.WaitGroup
	var done atomic.Int64
	for range 2 {
		wg.Go(func() {
			conn, err := pgx.Connect(ctx, url)
			if err != nil {
				errs <- err
				return
			}
			defer conn.Close(ctx)
			if _, err := conn.Exec(ctx, `SET session_replication_role = replica`); err != nil {
				errs <- err
				return
			}
			for lo := range chunks {
				hi := min(lo+fillChunk, first+n)
				t0 := from.Add(time.Duration(float64(span) * float64(lo-first) / float64(n)))
				t1 := from.Add(time.Duration(float64(span) * float64(hi-first) / float64(n)))
				if _, err := conn.Exec(ctx, fillSQL, lo, hi, t0, t1, handlers); err != nil {
					errs <- fmt.Errorf("fill events %d..%d: %w", lo, hi-1, err)
					return
				}
				if d := done.Add(hi - lo); d/1_000_000 != (d-(hi-lo))/1_000_000 {
					fmt.Fprintf(os.Stderr, "scale: filled %d of %d events\n", d, n)
				}
			}
		})
	}
	var err error
send:
	for lo := first; lo < first+n; lo += fillChunk {
		select {
		case chunks <- lo:
		case err = <-errs:
			break send
		}
	}
	close(chunks)
	wg.Wait()
	close(errs)
	return errors.Join(err, <-errs)
}

// vacuumPartitions runs VACUUM (ANALYZE) on every partition of the
// partitioned tables and on event_keys, one table at a time as autovacuum
// does; the parents themselves are not analyzed (autovacuum never does).
func vacuumPartitions(ctx context.Context, owner *pgx.Conn) error {
	rows, err := owner.Query(ctx, `
		SELECT c.oid::regclass::text
		FROM unnest(ARRAY['webhook_ingress.events', 'webhook_ingress.jobs', 'webhook_ingress.job_attempts', 'webhook_ingress.event_keys']::regclass[]) t
		JOIN pg_class c ON c.oid = t OR c.oid IN (SELECT relid FROM pg_partition_tree(t))
		WHERE c.relkind = 'r'`)
	if err != nil {
		return err
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	for _, t := range tables {
		if _, err := owner.Exec(ctx, "VACUUM (ANALYZE) "+t); err != nil {
			return fmt.Errorf("vacuum %s: %w", t, err)
		}
	}
	return nil
}

const byIDSQL = `SELECT id, event_received_at, status, attempt_count FROM webhook_ingress.jobs WHERE id = $1`

// claimBench claims in one database as the streamer does: its own
// connection (so one statement and plan cache serve every round), the
// streamer's default parameters, and dueJobs jobs due that every round
// leases and gives back.
type claimBench struct {
	owner        *pgx.Conn
	spool, wpool *pgxpool.Pool
	sc           streamer.Config
	ids          []int64
	url          string
}

// The streamer's claim as it runs it (sqlc's text: the arguments go in the
// order of the Params struct's fields).
var claimSQL = queries.ClaimJobs

// newClaimBench makes dueJobs jobs due (fresh events, fanned out by the
// trigger) and warms up: the connection, the plan cache (a prepared
// statement settles on a plan after five executions) and the buffers.
func newClaimBench(ctx context.Context, url string, owner *pgx.Conn, tag string) (*claimBench, error) {
	if err := makeDue(ctx, owner, tag); err != nil {
		return nil, err
	}
	cb := &claimBench{owner: owner, url: url, sc: streamer.Config{ID: "streamer-bench-scale"}.WithDefaults()}
	var err error
	cb.spool, err = database.Open(ctx, url, database.Options{Role: schema.StreamerRole, MaxConns: 1, AppName: "inlet-bench-scale-streamer"})
	if err != nil {
		return nil, err
	}
	cb.wpool, err = database.Open(ctx, url, database.Options{Role: schema.WorkerRole, MaxConns: 1, AppName: "inlet-bench-scale-worker"})
	if err != nil {
		cb.spool.Close()
		return nil, err
	}
	for range 10 {
		ids, _, err := cb.claim(ctx)
		if err != nil {
			cb.close()
			return nil, err
		}
		if len(ids) > len(cb.ids) {
			cb.ids = ids
		}
	}
	for i := range 10 {
		if _, err := cb.byID(ctx, i); err != nil {
			cb.close()
			return nil, err
		}
	}
	if len(cb.ids) == 0 {
		cb.close()
		return nil, errors.New("no job was due")
	}
	return cb, nil
}

func (cb *claimBench) args() []any {
	return claimArgs(cb.sc)
}

// claimArgs are ClaimJobs' arguments as the streamer passes them in most
// claims: no handler at its limit, within streamer.RecentWindow.
func claimArgs(sc streamer.Config) []any {
	window := streamer.RecentWindow
	return paramArgs(queries.ClaimJobsParams{FullHandlers: []string{}, BatchSize: int64(sc.BatchSize), LeaseHolder: sc.ID,
		LeaseFor: sc.LeaseDuration, ClaimWindow: &window})
}

// paramArgs lists the fields of a sqlc Params struct in order, which is the
// order of its statement's parameters: the bench runs some statements as
// text (to time them, or EXPLAIN them), and a parameter the query gains
// then comes along as a field (NULL until set here) instead of a run that
// fails with "expected 5 arguments, got 4", as the scale section did from
// 023_protocol_window to 2026-12-05.
func paramArgs(params any) []any {
	v := reflect.ValueOf(params)
	args := make([]any, v.NumField())
	for i := range args {
		args[i] = v.Field(i).Interface()
	}
	return args
}

// claim runs ClaimJobs once, timed, and then gives the leases back
// (untimed) so the next round finds the jobs due again.
func (cb *claimBench) claim(ctx context.Context) ([]int64, time.Duration, error) {
	t0 := time.Now()
	rows, err := cb.spool.Query(ctx, claimSQL, cb.args()...)
	if err != nil {
		return nil, 0, err
	}
	release := queries.ReleaseJobsParams{LeaseHolder: cb.sc.ID}
	_, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (struct{}, error) {
		vals, err := r.Values()
		if err != nil {
			return struct{}{}, err
		}
		// ClaimJobsRow's columns: id, …, attempt_count (5), …, attempted_at (10).
		release.JobIds = append(release.JobIds, vals[0].(int64))
		release.Attempts = append(release.Attempts, vals[5].(int32))
		release.LeasedAt = append(release.LeasedAt, vals[10].(time.Time))
		return struct{}{}, nil
	})
	took := time.Since(t0)
	if err != nil {
		return nil, 0, err
	}
	if len(release.JobIds) > 0 {
		if err := queries.New(cb.spool).ReleaseJobs(ctx, release); err != nil {
			return nil, 0, fmt.Errorf("release: %w", err)
		}
	}
	return release.JobIds, took, nil
}

// byID looks the i-th due job up by its id alone, as the worker, timed.
func (cb *claimBench) byID(ctx context.Context, i int) (time.Duration, error) {
	var (
		id, attempt int64
		at          time.Time
		status      string
	)
	want := int64(0)
	if len(cb.ids) > 0 {
		want = cb.ids[i%len(cb.ids)]
	}
	t0 := time.Now()
	err := cb.wpool.QueryRow(ctx, byIDSQL, want).Scan(&id, &at, &status, &attempt)
	if errors.Is(err, pgx.ErrNoRows) && want == 0 {
		err = nil // warming up before any id is known
	}
	if err != nil {
		return 0, fmt.Errorf("job %d by id: %w", want, err)
	}
	return time.Since(t0), nil
}

// plans explains the claim (the statement claim_jobs runs, on its generic
// plan) and the lookup by id.
func (cb *claimBench) plans(ctx context.Context) (*Plans, error) {
	p := &Plans{}
	var err error
	if p.Claim, err = nestedPlan(ctx, cb.url, schema.StreamerRole, "FOR UPDATE OF j SKIP LOCKED", claimSQL, cb.args()...); err != nil {
		return nil, fmt.Errorf("explain claim: %w", err)
	}
	if p.ByID, err = explainPlan(ctx, cb.wpool, "EXPLAIN (ANALYZE, BUFFERS) "+byIDSQL, cb.ids[0]); err != nil {
		return nil, fmt.Errorf("explain by id: %w", err)
	}
	return p, nil
}

func (cb *claimBench) close() {
	cb.spool.Close()
	cb.wpool.Close()
}

// finish completes the due jobs, so they count as finished at the next
// size, and closes the pools.
func (cb *claimBench) finish(ctx context.Context) error {
	cb.close()
	_, err := cb.owner.Exec(ctx, `
		UPDATE webhook_ingress.jobs
		SET status = 'completed', attempt_count = 1, completed_at = now(), updated_at = now(),
		    lease_holder_id = NULL, lease_expires_at = NULL
		WHERE status IN ('pending', 'failed', 'leased')`)
	return err
}

// measureClaim times rounds claims and lookups by id in the database at
// url, each round followed by the same in the baseline database (none when
// baseURL is empty), and returns the figures and the plans.
func measureClaim(ctx context.Context, url string, owner *pgx.Conn, baseURL string, baseOwner *pgx.Conn, rounds int, tag string) (ClaimAtSize, *Plans, error) {
	c := ClaimAtSize{Rounds: rounds}
	cb, err := newClaimBench(ctx, url, owner, tag)
	if err != nil {
		return c, nil, err
	}
	defer cb.close()
	var base *claimBench
	if baseURL != "" {
		if base, err = newClaimBench(ctx, baseURL, baseOwner, tag); err != nil {
			return c, nil, err
		}
		defer base.close()
	}
	var lat, baseLat, byID, baseByID []time.Duration
	for i := range rounds {
		ids, took, err := cb.claim(ctx)
		if err != nil {
			return c, nil, err
		}
		if len(ids) < dueJobs {
			c.Short++
		}
		lat = append(lat, took)
		d, err := cb.byID(ctx, i)
		if err != nil {
			return c, nil, err
		}
		byID = append(byID, d)
		if base == nil {
			continue
		}
		if _, took, err = base.claim(ctx); err != nil {
			return c, nil, fmt.Errorf("baseline: %w", err)
		}
		baseLat = append(baseLat, took)
		if d, err = base.byID(ctx, i); err != nil {
			return c, nil, fmt.Errorf("baseline: %w", err)
		}
		baseByID = append(baseByID, d)
	}
	for _, l := range [][]time.Duration{lat, baseLat, byID, baseByID} {
		slices.Sort(l)
	}
	c.ClaimP50, c.ClaimP99, c.ClaimMax = percentileMs(lat, 0.5), percentileMs(lat, 0.99), percentileMs(lat, 1)
	c.ByIDP50, c.ByIDP99 = percentileMs(byID, 0.5), percentileMs(byID, 0.99)
	plans, err := cb.plans(ctx)
	if err != nil {
		return c, nil, err
	}
	c.ClaimBuffers, c.ClaimExecMs = planCost(plans.Claim)
	if base != nil {
		c.EmptyP50, c.EmptyP99 = percentileMs(baseLat, 0.5), percentileMs(baseLat, 0.99)
		c.EmptyByIDP50 = percentileMs(baseByID, 0.5)
		c.RatioP50, c.RatioP99 = c.ClaimP50/c.EmptyP50, c.ClaimP99/c.EmptyP99
		bp, err := base.plans(ctx)
		if err != nil {
			return c, nil, fmt.Errorf("baseline: %w", err)
		}
		c.EmptyBuffers, _ = planCost(bp.Claim)
	}
	if err := owner.QueryRow(ctx, `
		SELECT count(*) FILTER (WHERE p.isleaf)::int, sum(pg_table_size(p.relid))::bigint, sum(pg_indexes_size(p.relid))::bigint
		FROM pg_partition_tree('webhook_ingress.jobs') p`).Scan(&c.Partitions, &c.HeapBytes, &c.IdxBytes); err != nil {
		return c, nil, err
	}
	if err := cb.finish(ctx); err != nil {
		return c, nil, err
	}
	if base != nil {
		if err := base.finish(ctx); err != nil {
			return c, nil, err
		}
	}
	return c, plans, nil
}

var (
	planBuffers = regexp.MustCompile(`Buffers: shared hit=(\d+)`)
	planExec    = regexp.MustCompile(`(?:Execution Time|duration): ([0-9.]+) ms`) // EXPLAIN's, or auto_explain's
)

// planCost reads a plan's buffers (hit, of its top node: the statement's,
// planning aside) and execution time: a cost the machine's load does not
// move.
func planCost(plan string) (buffers int64, execMs float64) {
	if m := planBuffers.FindStringSubmatch(plan); m != nil {
		buffers, _ = strconv.ParseInt(m[1], 10, 64)
	}
	if m := planExec.FindStringSubmatch(plan); m != nil {
		execMs, _ = strconv.ParseFloat(m[1], 64)
	}
	return buffers, execMs
}

func printPlans(label string, p *Plans) {
	fmt.Fprintf(os.Stderr, "\nClaimJobs %s (claim_jobs's statement, generic plan):\n%s\n\nJob by id %[1]s:\n%[3]s\n\n",
		label, p.Claim, p.ByID)
}

// makeDue stores dueJobs/fillHandlers fresh events with the subscriptions
// on, so the fan-out trigger makes dueJobs pending jobs, due now.
func makeDue(ctx context.Context, owner *pgx.Conn, tag string) error {
	return pgx.BeginFunc(ctx, owner, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `UPDATE webhook_ingress.subscriptions SET enabled = true WHERE handler LIKE 'scale-%'`); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, `
			INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, event_type, raw_body, signature_verified)
			SELECT 'stripe', 'stripe', 'evt_due_' || $1 || '_' || g, 'invoice.paid', convert_to('{"id":"evt_due"}', 'UTF8'), true
			FROM generate_series(1, $2::int) g`, tag, dueJobs/fillHandlers)
		if err != nil {
			return err
		}
		if tag.RowsAffected() != dueJobs/fillHandlers {
			return fmt.Errorf("stored %d due events, want %d", tag.RowsAffected(), dueJobs/fillHandlers)
		}
		_, err = tx.Exec(ctx, `UPDATE webhook_ingress.subscriptions SET enabled = false WHERE handler LIKE 'scale-%'`)
		return err
	})
}

// explainPlan runs the EXPLAIN statement in a transaction it rolls back.
func explainPlan(ctx context.Context, pool *pgxpool.Pool, stmt string, args ...any) (string, error) {
	var lines []string
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, stmt, args...)
		if err != nil {
			return err
		}
		if lines, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
			return err
		}
		return errRollback
	})
	if !errors.Is(err, errRollback) {
		return "", err
	}
	return strings.Join(lines, "\n"), nil
}

// nestedPlan runs stmt as role on a connection of its own (the database at
// url, as its superuser: auto_explain must be loaded) in a transaction it
// rolls back, and returns the plan auto_explain printed (ANALYZE, BUFFERS)
// of the statement stmt ran inside a function whose text holds marker.
func nestedPlan(ctx context.Context, url, role, marker, stmt string, args ...any) (string, error) {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return "", err
	}
	var mu sync.Mutex
	var notices []string
	cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) {
		mu.Lock()
		notices = append(notices, n.Message)
		mu.Unlock()
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return "", err
	}
	defer conn.Close(ctx)
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		for _, set := range []string{
			`LOAD 'auto_explain'`,
			`SET LOCAL auto_explain.log_min_duration = 0`,
			`SET LOCAL auto_explain.log_nested_statements = on`,
			`SET LOCAL auto_explain.log_analyze = on`,
			`SET LOCAL auto_explain.log_buffers = on`,
			`SET LOCAL client_min_messages = log`,
			`SET LOCAL ROLE ` + pgx.Identifier{role}.Sanitize(),
		} {
			if _, err := tx.Exec(ctx, set); err != nil {
				return fmt.Errorf("%s: %w", set, err)
			}
		}
		rows, err := tx.Query(ctx, stmt, args...)
		if err != nil {
			return err
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		return errRollback
	})
	if !errors.Is(err, errRollback) {
		return "", err
	}
	mu.Lock()
	defer mu.Unlock()
	for _, n := range notices {
		if strings.Contains(n, marker) && strings.Contains(n, "Query Text") {
			return n, nil
		}
	}
	return "", fmt.Errorf("auto_explain printed no plan holding %q (%d messages)", marker, len(notices))
}

var errRollback = errors.New("roll back")

// scaleRun drives n events through the lifecycle in a fresh database with
// the real statements and roles: InsertEvents (ingress, batches of 500,
// jobs made by the fan-out trigger), ClaimJobs (streamer), TakeJobs and
// CompleteJobs (worker, a claim's batch at a time), all at once and with
// the jobs in flight bounded, so autovacuum works on a hot queue as it
// would in production. Then it reports the tables' sizes and statistics.
func scaleRun(ctx context.Context, b *bench, n int) (*LifecycleRun, error) {
	url, err := scratchDatabase(ctx, b, "inlet_scale_run")
	if err != nil {
		return nil, err
	}
	owner, err := pgx.Connect(ctx, url)
	if err != nil {
		return nil, err
	}
	defer owner.Close(ctx)
	const handler = "scale-run"
	if _, err := owner.Exec(ctx, `INSERT INTO webhook_ingress.subscriptions (handler, provider_pattern) VALUES ($1, 'stripe')`, handler); err != nil {
		return nil, err
	}
	open := func(role, name string, conns int32) (*pgxpool.Pool, error) {
		return database.Open(ctx, url, database.Options{Role: role, MaxConns: conns, AppName: "inlet-bench-scale-" + name})
	}
	ipool, err := open(schema.IngressRole, "ingress", 2)
	if err != nil {
		return nil, err
	}
	defer ipool.Close()
	spool, err := open(schema.StreamerRole, "streamer", 2)
	if err != nil {
		return nil, err
	}
	defer spool.Close()
	wpool, err := open(schema.WorkerRole, "worker", 4)
	if err != nil {
		return nil, err
	}
	defer wpool.Close()

	sc := streamer.Config{ID: "streamer-bench-scale-run"}.WithDefaults()
	cc := consumers.Config{WorkerID: "consumer-bench-scale-run"}.WithDefaults()
	var (
		insertSQL   = schema.Query("InsertEvents")
		takeSQL     = schema.Query("FetchJobs")
		completeSQL = schema.Query("CompleteJobs")
	)
	runCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	fail := func(err error) { cancel(err) }
	var next, inserted, claimed, completed, maxBacklog atomic.Int64
	total := int64(n)
	prefix := fmt.Sprintf("evt_run_%d_", time.Now().UnixNano())
	work := make(chan []claimedJob, 16)
	start := time.Now()

	// Every 10s: progress on stderr, and a sample of the jobs partitions.
	var timeline []RunSample
	stopSampling := make(chan struct{})
	var sampler sync.WaitGroup
	sampler.Go(func() {
		t := time.NewTicker(10 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-stopSampling:
				return
			case <-t.C:
			}
			smp := RunSample{Seconds: time.Since(start).Seconds(), Completed: completed.Load(), InFlight: inserted.Load() - completed.Load()}
			if err := owner.QueryRow(ctx, jobsSampleSQL).Scan(&smp.JobsDead, &smp.JobsAutovacuums, &smp.JobsBytes, &smp.ClaimableBytes); err != nil {
				fmt.Fprintf(os.Stderr, "scale run: sample: %v\n", err)
			}
			timeline = append(timeline, smp)
			fmt.Fprintf(os.Stderr, "scale run: %d of %d events completed after %s (%d in flight); jobs: %d dead, %d autovacuums, %.0f MB (claimable index %.1f MB)\n",
				smp.Completed, total, time.Since(start).Round(time.Second), smp.InFlight, smp.JobsDead, smp.JobsAutovacuums,
				mb(smp.JobsBytes), mb(smp.ClaimableBytes))
		}
	})

	var producers, claimers, workers sync.WaitGroup
	for range 2 {
		producers.Go(func() {
			for runCtx.Err() == nil {
				lo := next.Add(runBatch) - runBatch
				if lo >= total {
					return
				}
				k := int(min(runBatch, total-lo))
				for inserted.Load()-completed.Load() > runBacklog && runCtx.Err() == nil {
					time.Sleep(time.Millisecond)
				}
				stored, err := insertRunEvents(runCtx, ipool, insertSQL, prefix, lo, k)
				if err != nil {
					fail(fmt.Errorf("insert events %d..%d: %w", lo, lo+int64(k)-1, err))
					return
				}
				if stored != k {
					fail(fmt.Errorf("insert events %d..%d: %d stored", lo, lo+int64(k)-1, stored))
					return
				}
				in := inserted.Add(int64(k))
				if bl := in - completed.Load(); bl > maxBacklog.Load() {
					maxBacklog.Store(bl)
				}
			}
		})
	}
	for range 2 {
		claimers.Go(func() {
			for runCtx.Err() == nil && claimed.Load() < total {
				refs, err := claimRun(runCtx, spool, claimSQL, sc)
				if err != nil {
					fail(fmt.Errorf("claim: %w", err))
					return
				}
				if len(refs) == 0 {
					time.Sleep(2 * time.Millisecond)
					continue
				}
				claimed.Add(int64(len(refs)))
				select {
				case work <- refs:
				case <-runCtx.Done():
					return
				}
			}
		})
	}
	for range 4 {
		workers.Go(func() {
			for refs := range work {
				k, err := takeAndComplete(runCtx, wpool, takeSQL, completeSQL, cc, refs)
				if err != nil {
					fail(err)
					return
				}
				if k != len(refs) {
					fail(fmt.Errorf("completed %d of %d jobs taken (job ids from %d)", k, len(refs), refs[0].id))
					return
				}
				completed.Add(int64(k))
			}
		})
	}
	producers.Wait()
	claimers.Wait()
	close(work)
	workers.Wait()
	close(stopSampling)
	sampler.Wait()
	if err := context.Cause(runCtx); err != nil {
		return nil, err
	}
	took := time.Since(start)
	ipool.Close()
	spool.Close()
	wpool.Close()
	// Let the backends' statistics reach the cumulative statistics system.
	time.Sleep(2 * time.Second)

	run := &LifecycleRun{Events: n, Seconds: took.Seconds(), PerSecond: float64(n) / took.Seconds(), MaxBacklog: maxBacklog.Load(), Timeline: timeline}
	if run.Tables, err = tableSizes(ctx, owner); err != nil {
		return nil, err
	}
	if run.Settings, err = vacuumSettings(ctx, owner); err != nil {
		return nil, err
	}
	if err := addFillSubscriptions(ctx, owner); err != nil {
		return nil, err
	}
	c, plans, err := measureClaim(ctx, url, owner, "", nil, *scaleRounds, "run")
	if err != nil {
		return nil, fmt.Errorf("claim after the run: %w", err)
	}
	run.ClaimAfter, run.ClaimAfterPlans = &c, plans
	printPlans(fmt.Sprintf("after the %d-event run", n), plans)
	// Once vacuum and analyze have caught up with the run.
	if err := vacuumPartitions(ctx, owner); err != nil {
		return nil, err
	}
	v, _, err := measureClaim(ctx, url, owner, "", nil, *scaleRounds, "vacuumed")
	if err != nil {
		return nil, fmt.Errorf("claim after the run, vacuumed: %w", err)
	}
	run.ClaimVacuumed = &v
	return run, nil
}

// claimedJob is what the streamer publishes of a job it leased and the
// consumer takes it by.
type claimedJob struct {
	id, eventID int64
	handler     string
	attempt     int32
	partition   time.Time
	leasedAt    time.Time
}

func insertRunEvents(ctx context.Context, pool *pgxpool.Pool, sql, prefix string, lo int64, k int) (int, error) {
	provider, scheme, extID, evType, headers, uri, trace := make([]string, k), make([]string, k), make([]string, k), make([]string, k), make([]string, k), make([]string, k), make([]string, k)
	bodies, verified, secret := make([][]byte, k), make([]bool, k), make([]*int16, k)
	zero := int16(0)
	now := time.Now()
	for i := range k {
		id := prefix + strconv.FormatInt(lo+int64(i), 10)
		body := []byte(`{"id":"` + id + `","object":"event","type":"invoice.paid","data":{"object":{"id":"in_1","amount_due":2000,"currency":"usd","customer":"cus_bench"}}}` + strings.Repeat(" ", 160))
		h := verify.SignStripe(stripeSecret, now, body)
		h.Set("Content-Type", "application/json")
		h.Set("User-Agent", "Stripe/1.0 (+https://stripe.com/docs/webhooks)")
		hj, _ := json.Marshal(h)
		provider[i], scheme[i], extID[i], evType[i], headers[i], uri[i] = "stripe", "stripe", id, "invoice.paid", string(hj), "/webhooks/stripe"
		bodies[i], verified[i], secret[i] = body, true, &zero
	}
	rows, err := pool.Query(ctx, sql, provider, scheme, extID, evType, headers, bodies, verified, secret, uri, trace,
		make([]bool, len(provider)), make([]*time.Time, len(provider)), 0)
	if err != nil {
		return 0, err
	}
	stored := 0
	for rows.Next() {
		stored++
	}
	rows.Close()
	return stored, rows.Err()
}

func claimRun(ctx context.Context, pool *pgxpool.Pool, sql string, sc streamer.Config) ([]claimedJob, error) {
	rows, err := pool.Query(ctx, sql, claimArgs(sc)...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (claimedJob, error) {
		var (
			j                             claimedJob
			provider, eventType, traceCol string
			maxAttempts                   int32
			leaseExpires                  time.Time
		)
		err := r.Scan(&j.id, &j.eventID, &j.handler, &provider, &eventType, &j.attempt, &maxAttempts, &leaseExpires, &traceCol, &j.partition, &j.leasedAt)
		return j, err
	})
}

// takeAndComplete reads a claim's jobs in one FetchJobs statement, as a
// consumer batches the attempts starting together, and records them all
// successful in one CompleteJobs statement. It returns how many completed.
func takeAndComplete(ctx context.Context, pool *pgxpool.Pool, takeSQL, completeSQL string, cc consumers.Config, refs []claimedJob) (int, error) {
	slices.SortFunc(refs, func(a, b claimedJob) int { return cmp.Compare(a.id, b.id) })
	k := len(refs)
	ids, attempts, handlers, events, partitions, leasedAt := make([]int64, k), make([]int32, k), make([]string, k), make([]int64, k), make([]time.Time, k), make([]time.Time, k)
	for i, r := range refs {
		ids[i], attempts[i], handlers[i], events[i], partitions[i], leasedAt[i] = r.id, r.attempt, r.handler, r.eventID, r.partition, r.leasedAt
	}
	rows, err := pool.Query(ctx, takeSQL, ids, attempts, handlers, events, partitions, leasedAt)
	if err != nil {
		return 0, fmt.Errorf("read %d jobs (ids %d..): %w", k, ids[0], err)
	}
	byID := make(map[int64]claimedJob, k)
	for _, r := range refs {
		byID[r.id] = r
	}
	var tIDs []int64
	var tAttempts []int32
	var tParts, tLeased []time.Time
	for rows.Next() {
		var (
			id, maxAttempts                    int64
			leased, expires, started, received time.Time
			eventID                            *int64
			provider, scheme, extID, eventType string
			headers                            map[string][]string
			body                               []byte
		)
		if err := rows.Scan(&id, &leased, &expires, &maxAttempts, &started, &eventID,
			&provider, &scheme, &extID, &eventType, &received, &headers, &body, new(*time.Time)); err != nil {
			rows.Close()
			return 0, fmt.Errorf("read: scan: %w", err)
		}
		if eventID == nil {
			rows.Close()
			return 0, fmt.Errorf("read: job %d: its event is missing", id)
		}
		r := byID[id]
		tIDs, tAttempts = append(tIDs, id), append(tAttempts, r.attempt)
		tParts, tLeased = append(tParts, r.partition), append(tLeased, leased)
	}
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("read %d jobs (ids %d..): %w", k, ids[0], err)
	}
	if len(tIDs) == 0 {
		return 0, nil
	}
	tag, err := pool.Exec(ctx, completeSQL, tIDs, tAttempts, tParts, tLeased, cc.WorkerID)
	if err != nil {
		return 0, fmt.Errorf("complete %d jobs (ids %d..): %w", len(tIDs), tIDs[0], err)
	}
	return int(tag.RowsAffected()), nil
}

// tableSizes sums each table's partitions (an unpartitioned table, which
// pg_partition_tree leaves out, is its own one): sizes, tuples and the
// cumulative statistics' counters, and each index over its partitions.
func tableSizes(ctx context.Context, owner *pgx.Conn) ([]TableSize, error) {
	names := []string{"events", "jobs", "job_attempts", "event_keys"}
	rows, err := owner.Query(ctx, `
		SELECT t.name, count(*)::int,
		       sum(pg_table_size(p.relid))::bigint, sum(pg_indexes_size(p.relid))::bigint,
		       coalesce(sum(s.n_live_tup), 0)::bigint, coalesce(sum(s.n_dead_tup), 0)::bigint,
		       coalesce(sum(s.n_tup_upd), 0)::bigint, coalesce(sum(s.n_tup_hot_upd), 0)::bigint,
		       coalesce(sum(s.autovacuum_count), 0)::bigint, coalesce(sum(s.autoanalyze_count), 0)::bigint
		FROM unnest($1::text[]) WITH ORDINALITY AS t(name, ord)
		CROSS JOIN LATERAL (SELECT c.oid AS relid FROM pg_class c
		                    WHERE c.relkind = 'r' AND (c.oid = ('webhook_ingress.' || t.name)::regclass
		                       OR c.oid IN (SELECT relid FROM pg_partition_tree(('webhook_ingress.' || t.name)::regclass)))) p
		LEFT JOIN pg_stat_user_tables s ON s.relid = p.relid
		GROUP BY t.name, t.ord
		ORDER BY t.ord`, names)
	if err != nil {
		return nil, err
	}
	tables, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (TableSize, error) {
		var t TableSize
		err := r.Scan(&t.Table, &t.Partitions, &t.HeapBytes, &t.IndexBytes, &t.LiveTuples, &t.DeadTuples,
			&t.Updates, &t.HotUpdates, &t.Autovacuums, &t.Autoanalyzes)
		return t, err
	})
	if err != nil {
		return nil, fmt.Errorf("table sizes: %w", err)
	}
	rows, err = owner.Query(ctx, `
		SELECT t.name, c.relname::text, sum(pg_relation_size(p.relid))::bigint
		FROM unnest($1::text[]) AS t(name)
		JOIN pg_index i ON i.indrelid = ('webhook_ingress.' || t.name)::regclass
		JOIN pg_class c ON c.oid = i.indexrelid
		CROSS JOIN LATERAL (SELECT x.oid AS relid FROM pg_class x
		                    WHERE x.relkind = 'i' AND (x.oid = i.indexrelid
		                       OR x.oid IN (SELECT relid FROM pg_partition_tree(i.indexrelid)))) p
		GROUP BY 1, 2
		ORDER BY 1, 3 DESC, 2`, names)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var table string
		var ix IndexSize
		if err := rows.Scan(&table, &ix.Name, &ix.Bytes); err != nil {
			return nil, err
		}
		for i := range tables {
			if tables[i].Table == table {
				tables[i].Indexes = append(tables[i].Indexes, ix)
			}
		}
	}
	return tables, rows.Err()
}

// vacuumSettings are the autovacuum settings the run had: the server's and
// the storage options of the partition the run's jobs were in.
func vacuumSettings(ctx context.Context, owner *pgx.Conn) (map[string]string, error) {
	rows, err := owner.Query(ctx, `
		SELECT name, setting FROM pg_settings WHERE name LIKE 'autovacuum%' OR name = 'fillfactor'
		UNION ALL
		SELECT 'jobs partition ' || c.relname, coalesce(array_to_string(c.reloptions, ', '), '')
		FROM pg_class c
		WHERE c.oid = (SELECT tableoid FROM webhook_ingress.jobs ORDER BY id DESC LIMIT 1)`)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for rows.Next() {
		var k, v string
		if err := rows.Scan(&k, &v); err != nil {
			return nil, err
		}
		out[k] = v
	}
	return out, rows.Err()
}

func printClaims(claims []ClaimAtSize) {
	fmt.Printf("ClaimJobs (batch %d, %d due) and a job by id, %d rounds each, alternating with the same in an empty twin database;\n"+
		"finished jobs spread over %d weekly partitions (19 in all), vacuumed and analyzed:\n\n", dueJobs, dueJobs, *scaleRounds, fillWeeks)
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "FINISHED JOBS\tJOBS MB (HEAP+IDX)\tFILL S\tVACUUM S\tCLAIM P50 MS\tP99 MS\tEMPTY P50 MS\tP99 MS\t/ EMPTY P50\tP99\tBUFFERS\t/ EMPTY\tBY ID P50 MS\tP99 MS\tEMPTY BY ID P50\tSHORT")
	for _, c := range claims {
		fmt.Fprintf(tw, "%d\t%.0f+%.0f\t%.0f\t%.0f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f×\t%.2f×\t%d\t%.2f×\t%.2f\t%.2f\t%.2f\t%d\n",
			c.Finished, mb(c.HeapBytes), mb(c.IdxBytes), c.FillSeconds, c.VacuumSeconds, c.ClaimP50, c.ClaimP99,
			c.EmptyP50, c.EmptyP99, c.RatioP50, c.RatioP99, c.ClaimBuffers, float64(c.ClaimBuffers)/float64(max(c.EmptyBuffers, 1)),
			c.ByIDP50, c.ByIDP99, c.EmptyByIDP50, c.Short)
	}
	tw.Flush()
	last := claims[len(claims)-1]
	verdict := "met"
	if last.RatioP50 > 1.5 {
		verdict = "missed"
	}
	fmt.Printf("\ntarget: claim p50 at %d finished jobs within 1.5× of the empty table's: %s (%.2f×; p99 %.2f×; buffers %.2f×); plans on stderr and in the JSON\n",
		last.Finished, verdict, last.RatioP50, last.RatioP99, float64(last.ClaimBuffers)/float64(max(last.EmptyBuffers, 1)))
}

func printRun(r *LifecycleRun) {
	fmt.Printf("\n%d events through InsertEvents → ClaimJobs → TakeJobs → CompleteJobs in %s (%.0f/s, at most %d jobs in flight):\n\n",
		r.Events, (time.Duration(r.Seconds * float64(time.Second))).Round(time.Second), r.PerSecond, r.MaxBacklog)
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TABLE\tPARTS\tHEAP MB\tINDEX MB\tLIVE\tDEAD\tUPDATES\tHOT\tAUTOVACUUM\tAUTOANALYZE\tLARGEST INDEXES (MB)")
	for _, t := range r.Tables {
		var ix []string
		for _, i := range t.Indexes[:min(3, len(t.Indexes))] {
			ix = append(ix, fmt.Sprintf("%s %.1f", i.Name, mb(i.Bytes)))
		}
		fmt.Fprintf(tw, "%s\t%d\t%.1f\t%.1f\t%d\t%d\t%d\t%d\t%d\t%d\t%s\n", t.Table, t.Partitions, mb(t.HeapBytes), mb(t.IndexBytes),
			t.LiveTuples, t.DeadTuples, t.Updates, t.HotUpdates, t.Autovacuums, t.Autoanalyzes, strings.Join(ix, ", "))
	}
	tw.Flush()
	var keys []string
	for k := range r.Settings {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	fmt.Println()
	for _, k := range keys {
		if strings.HasPrefix(k, "jobs partition") || k == "autovacuum_naptime" || k == "autovacuum_vacuum_scale_factor" || k == "autovacuum_vacuum_insert_scale_factor" {
			fmt.Printf("%s = %s\n", k, r.Settings[k])
		}
	}
	fmt.Println()
	for _, a := range []struct {
		when string
		c    *ClaimAtSize
	}{{"right after the run", r.ClaimAfter}, {"after VACUUM (ANALYZE)", r.ClaimVacuumed}} {
		if a.c != nil {
			fmt.Printf("ClaimJobs on the run's tables %s: p50 %.2f ms, p99 %.2f ms; a job by id: p50 %.2f ms, p99 %.2f ms\n",
				a.when, a.c.ClaimP50, a.c.ClaimP99, a.c.ByIDP50, a.c.ByIDP99)
		}
	}
}

func mb(b int64) float64 { return float64(b) / (1 << 20) }
