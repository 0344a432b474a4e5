package schema_test

import (
	"context"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/schema"
	"github.com/inlet-dev/inlet/schema/queries"
)

// heldBackBacklog is how many due jobs the held-back handler has in the
// tests below: far more than any claim should read.
const heldBackBacklog = 20000

// seedHeldBack gives handler "down" heldBackBacklog due jobs (the oldest) and
// handlers "a", "b" and "c" 40 each after them, interleaved: one event of
// source down, then one of source abc that a, b and c all take.
func seedHeldBack(t *testing.T, conn *pgx.Conn) {
	t.Helper()
	execAll(t, conn,
		`INSERT INTO webhook_ingress.subscriptions (handler, provider_pattern)
		 VALUES ('down', 'down'), ('a', 'abc'), ('b', 'abc'), ('c', 'abc')`,
		`INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, raw_body, signature_verified)
		 SELECT 'down', 'stripe', 'evt_down_' || n, '{}', true FROM generate_series(1, `+strconv.Itoa(heldBackBacklog)+`) n`,
		`INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, raw_body, signature_verified)
		 SELECT 'abc', 'stripe', 'evt_abc_' || n, '{}', true FROM generate_series(1, 40) n`,
		`ANALYZE webhook_ingress.jobs`,
	)
}

// A claim that holds handlers back (at their in-flight limit, their
// consumers gone quiet, or limited) leases the same jobs a walk in due order
// would, of the other handlers only, batch by batch until none is left.
func TestClaimHoldingHandlersBackLeasesTheOthersInDueOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	conn, _ := connectKeepingNotices(t)
	seedHeldBack(t, conn)
	q := queries.New(conn)
	window := time.Hour
	var leased []int64
	for round := 0; ; round++ {
		// The jobs a walk in due order would lease next, down and c left out.
		var want []int64
		rows, err := conn.Query(ctx, `SELECT id FROM webhook_ingress.jobs
			WHERE status IN ('pending', 'failed') AND next_attempt_at <= now() AND handler NOT IN ('down', 'c')
			ORDER BY next_attempt_at, id LIMIT 25`)
		if err != nil {
			t.Fatal(err)
		}
		if want, err = pgx.CollectRows(rows, pgx.RowTo[int64]); err != nil {
			t.Fatal(err)
		}
		got, err := q.ClaimJobs(ctx, queries.ClaimJobsParams{FullHandlers: []string{"down", "c"}, BatchSize: 25,
			LeaseHolder: "held-back-streamer", LeaseFor: time.Minute, ClaimWindow: &window})
		if err != nil {
			t.Fatal(err)
		}
		var ids []int64
		for _, j := range got {
			if j.Handler == "down" || j.Handler == "c" {
				t.Fatalf("round %d leased job %d of held-back handler %s", round, j.ID, j.Handler)
			}
			ids = append(ids, j.ID)
		}
		slices.Sort(ids)
		slices.Sort(want)
		if !slices.Equal(ids, want) {
			t.Fatalf("round %d leased %v, want the first in due order %v", round, ids, want)
		}
		if len(ids) == 0 {
			break
		}
		leased = append(leased, ids...)
	}
	if len(leased) != 80 {
		t.Fatalf("%d jobs of a and b leased, want all 80", len(leased))
	}
	// Nothing held back: the walk, c's jobs included.
	got, err := q.ClaimJobs(ctx, queries.ClaimJobsParams{FullHandlers: []string{"down"}, BatchSize: 100,
		LeaseHolder: "held-back-streamer", LeaseFor: time.Minute, ClaimWindow: &window})
	if err != nil || len(got) != 40 {
		t.Fatalf("claim holding back down only: %v, %d jobs leased, want c's 40", err, len(got))
	}
}

// 024_claim_by_handler: a held-back handler's due jobs are the oldest (no
// one takes them), and the claim read all of them, as a filter on its walk
// in due order, before any other handler's: with 100,000 of a dead
// consumer's handler waiting, every claim took 35-40 ms instead of 1-3. The
// claim must read about as many buffers as it leases jobs, not the
// held-back backlog. Counted in buffers, not timed.
func TestClaimDoesNotReadAHeldBackHandlersBacklog(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	conn, messages := explaining(t)
	seedHeldBack(t, conn)
	execAll(t, conn, explainNested...)
	window := time.Hour
	got, err := queries.New(conn).ClaimJobs(ctx, queries.ClaimJobsParams{FullHandlers: []string{"down"}, BatchSize: 100,
		LeaseHolder: "held-back-streamer", LeaseFor: time.Minute, ClaimWindow: &window})
	if err != nil || len(got) != 100 {
		t.Fatalf("claim: %v, %d jobs leased, want 100", err, len(got))
	}
	plans := nestedPlans(t, conn, messages, "claim_jobs")
	if !slices.ContainsFunc(plans, func(p string) bool { return strings.Contains(p, "FOR UPDATE OF j SKIP LOCKED") }) {
		t.Fatalf("auto_explain printed no plan of claim_jobs's statements; messages:\n%s", strings.Join(messages(), "\n---\n"))
	}
	plan := strings.Join(plans, "\n")
	// Leasing 100 jobs reads about as many; a walk past the backlog reads
	// every held-back job (as a filter's rejects, or rows a sort drops).
	if n := tuplesRead(plan); n > heldBackBacklog/10 {
		t.Fatalf("the claim of 100 jobs read %d rows with %d due jobs held back (want at most %d):\n%s",
			n, heldBackBacklog, heldBackBacklog/10, plan)
	}
}

var (
	scanNode = regexp.MustCompile(`Scan .*\(actual time=[0-9.]+\.\.[0-9.]+ rows=(\d+) loops=(\d+)\)`)
	anyNode  = regexp.MustCompile(`\(actual time=[0-9.]+\.\.[0-9.]+ rows=\d+ loops=(\d+)\)`)
	removed  = regexp.MustCompile(`Rows Removed by (?:Filter|Index Recheck): (\d+)`)
)

// tuplesRead sums, over an EXPLAIN ANALYZE plan, the rows every scan node
// returned and the rows its filters removed, each times the node's loops
// (EXPLAIN prints both per loop).
func tuplesRead(plan string) int {
	total, loops := 0, 1
	for _, line := range strings.Split(plan, "\n") {
		if m := anyNode.FindStringSubmatch(line); m != nil {
			loops, _ = strconv.Atoi(m[1])
		}
		if m := scanNode.FindStringSubmatch(line); m != nil {
			rows, _ := strconv.Atoi(m[1])
			total += rows * loops
		}
		if m := removed.FindStringSubmatch(line); m != nil {
			n, _ := strconv.Atoi(m[1])
			total += n * loops
		}
	}
	return total
}

// 025_fetch_by_event_id: the consumer's read probed each job's event by
// received_at and id, and a generic plan could pick idx_events_received_at
// for it, reading every event stored in the same transaction to find one: a
// group commit's batch, or thousands for a bulk load. Seen in the bench's
// jobs section (20,000 events loaded by one statement, statistics from
// earlier runs): 1.3 ms per job read, 742 jobs/s instead of ~8,000. The read
// must probe each event by its id.
func TestFetchReadsOneEventPerJob(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	conn, messages := explaining(t)
	const shared = 5000 // events stored by one statement: one received_at
	execAll(t, conn,
		`INSERT INTO webhook_ingress.subscriptions (handler, provider_pattern) VALUES ('reader', 'stripe')`,
		// Statistics that say received_at is nearly unique, as a log of
		// webhooks stored a few at a time has.
		`INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, raw_body, signature_verified, received_at)
		 SELECT 'earlier', 'stripe', 'evt_earlier_' || n, '{}', true, now() - n * interval '1 ms' FROM generate_series(1, 5000) n`,
		`ANALYZE webhook_ingress.events`,
		`INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, raw_body, signature_verified)
		 SELECT 'stripe', 'stripe', 'evt_shared_' || n, '{}', true FROM generate_series(1, `+strconv.Itoa(shared)+`) n`,
	)
	window := time.Hour
	claimed, err := queries.New(conn).ClaimJobs(ctx, queries.ClaimJobsParams{FullHandlers: []string{}, BatchSize: 50,
		LeaseHolder: "reader-streamer", LeaseFor: time.Minute, ClaimWindow: &window})
	if err != nil || len(claimed) != 50 {
		t.Fatalf("claim: %v, %d jobs leased, want 50", err, len(claimed))
	}
	execAll(t, conn, explainNested...)
	if read := fetchAll(t, conn, claimed); read != 50 {
		t.Fatalf("fetch: %d attempts read, want 50", read)
	}
	plans := nestedPlans(t, conn, messages, "fetch_jobs")
	if !slices.ContainsFunc(plans, func(p string) bool { return strings.Contains(p, "webhook_ingress.events e") }) {
		t.Fatalf("auto_explain printed no plan of fetch_jobs's statement; messages:\n%s", strings.Join(messages(), "\n---\n"))
	}
	plan := strings.Join(plans, "\n")
	// A job and its event each: 100 rows, and a few more.
	if n := tuplesRead(plan); n > 500 {
		t.Fatalf("reading 50 jobs read %d rows with %d events sharing their received_at:\n%s", n, shared, plan)
	}
}

// A claim's lease (the UPDATE of the jobs it locked) joined them to jobs
// with a plan chosen on the generic plan's guess of how many it locked (a
// tenth of an unknown LIMIT): with statistics of a third of a partition of
// ~42,000 jobs, a hash join that read the whole partition on every claim, 60-100 ms
// for 100 jobs (the bench's jobs section after its e2e section, 2026-12-05).
// The lease must read about the jobs it leases, whatever the statistics.
func TestClaimLeasesByTupleIDWhateverTheStatistics(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	conn, messages := explaining(t)
	seedStaleStatistics(t, conn, "now", 200)
	execAll(t, conn, explainNested...)
	window := time.Hour
	for _, full := range [][]string{{}, {"done"}} { // the walk, and the claim holding a handler back
		got, err := queries.New(conn).ClaimJobs(ctx, queries.ClaimJobsParams{FullHandlers: full, BatchSize: 100,
			LeaseHolder: "stats-streamer", LeaseFor: time.Minute, ClaimWindow: &window})
		if err != nil || len(got) != 100 {
			t.Fatalf("claim holding back %v: %v, %d jobs leased, want 100", full, err, len(got))
		}
	}
	plans := nestedPlans(t, conn, messages, "claim_jobs")
	if len(plans) == 0 {
		t.Fatalf("auto_explain printed no plan of claim_jobs's statements; messages:\n%s", strings.Join(messages(), "\n---\n"))
	}
	// Two claims of 100: each reads its jobs to lock them and again to lease
	// them, and a few more.
	if n := tuplesRead(strings.Join(plans, "\n")); n > 2000 {
		t.Fatalf("two claims of 100 jobs read %d rows beside 40,000 finished jobs:\n%s", n, strings.Join(plans, "\n---\n"))
	}
}

// A limited handler's claim (ClaimLimitedJobs, a statement of its own, not
// claim_jobs) joined the jobs it locked back to jobs, as claim_jobs did
// before 024. pgx prepares its statements, so after five runs it may run on
// a generic plan: with the same statistics as above that was a hash join
// over a scan of the whole partition, 43,405 rows read and ~130 ms to lease
// 100, in every claim round of the streamer while the handler has due jobs.
// It now leases by tuple id too (in claim_limited_jobs since 033).
func TestClaimLimitedLeasesByTupleIDWhateverTheStatistics(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	conn, messages := explaining(t)
	execAll(t, conn,
		`INSERT INTO webhook_ingress.handler_limits (handler, rate_per_second, burst, tokens) VALUES ('limited', 0.001, 100000, 100000)`)
	seedStaleStatistics(t, conn, "limited", 300)
	execAll(t, conn, `SET plan_cache_mode = force_generic_plan`) // as after five runs of the prepared statement
	execAll(t, conn, explainNested...)
	q := queries.New(conn)
	seen := map[int64]bool{}
	for round := range 2 {
		got, err := q.ClaimLimitedJobs(ctx, queries.ClaimLimitedJobsParams{Handler: "limited", BatchSize: 100,
			LeaseHolder: "stats-streamer", LeaseFor: time.Minute})
		if err != nil || len(got) != 100 {
			t.Fatalf("limited claim %d: %v, %d jobs leased, want 100", round, err, len(got))
		}
		for _, j := range got {
			if j.Handler != "limited" || seen[j.ID] {
				t.Fatalf("limited claim %d leased job %d of %s (seen before: %v)", round, j.ID, j.Handler, seen[j.ID])
			}
			seen[j.ID] = true
		}
	}
	// The statements of claim_limited_jobs (033): the limits, the walk, the
	// key locks (none here), the lease and the token update.
	plans := nestedPlans(t, conn, messages, "claim_limited_jobs")
	if len(plans) < 4 {
		t.Fatalf("auto_explain printed %d plans of the limited claim's statements, want at least 4; messages:\n%s", len(plans), strings.Join(messages(), "\n---\n"))
	}
	// The walk, the lease and the token update of 200 jobs, and a few more.
	if n := tuplesRead(strings.Join(plans, "\n")); n > 4000 {
		t.Fatalf("two limited claims of 100 jobs read %d rows beside 42,000 finished jobs:\n%s", n, strings.Join(plans, "\n---\n"))
	}
	var leased, tokens int
	if err := conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM webhook_ingress.jobs WHERE handler = 'limited' AND status = 'leased'),
		(SELECT floor(tokens)::int FROM webhook_ingress.handler_limits WHERE handler = 'limited')`).Scan(&leased, &tokens); err != nil {
		t.Fatal(err)
	}
	if leased != 200 || tokens > 100000-200 {
		t.Fatalf("%d jobs leased and %d tokens left after two claims of 100, want 200 and at most %d", leased, tokens, 100000-200)
	}
}

// explaining connects as connectKeepingNotices does, with auto_explain
// loaded for the session; it skips the test on a server without it.
func explaining(t *testing.T) (conn *pgx.Conn, messages func() []string) {
	t.Helper()
	conn, messages = connectKeepingNotices(t)
	if _, err := conn.Exec(context.Background(), `LOAD 'auto_explain'`); err != nil {
		t.Skipf("no auto_explain on this server (%v)", err)
	}
	return conn, messages
}

// seedStaleStatistics gives handler "done" 42,000 finished jobs, with the
// statistics of a third of them taken while they were all due (a backlog,
// as between two runs of autovacuum's ANALYZE), then handler due jobs due
// now, one per event of source stripe.
func seedStaleStatistics(t *testing.T, conn *pgx.Conn, handler string, due int) {
	t.Helper()
	if _, err := conn.Exec(context.Background(),
		`INSERT INTO webhook_ingress.subscriptions (handler, provider_pattern) VALUES ('done', 'earlier'), ($1, 'stripe')`, handler); err != nil {
		t.Fatal(err)
	}
	execAll(t, conn,
		`INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, raw_body, signature_verified)
		 SELECT 'earlier', 'stripe', 'evt_done_' || n, '{}', true FROM generate_series(1, 14000) n`,
		`ANALYZE webhook_ingress.jobs`, // while they are all due
		`UPDATE webhook_ingress.jobs SET status = 'completed', completed_at = now() WHERE handler = 'done'`,
		`INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, raw_body, signature_verified)
		 SELECT 'earlier', 'stripe', 'evt_done_' || n, '{}', true FROM generate_series(14001, 42000) n`,
		`UPDATE webhook_ingress.jobs SET status = 'completed', completed_at = now() WHERE handler = 'done' AND status = 'pending'`,
		`INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, raw_body, signature_verified)
		 SELECT 'stripe', 'stripe', 'evt_now_' || n, '{}', true FROM generate_series(1, `+strconv.Itoa(due)+`) n`,
	)
}

// explainNested has auto_explain send the session's client the plans of the
// statements functions run, with their row counts.
var explainNested = []string{
	`SET auto_explain.log_min_duration = 0`,
	`SET auto_explain.log_nested_statements = on`,
	`SET auto_explain.log_analyze = on`,
	`SET client_min_messages = log`,
}

// execAll runs each statement on conn, failing the test at the first error.
func execAll(t *testing.T, conn *pgx.Conn, stmts ...string) {
	t.Helper()
	for _, stmt := range stmts {
		if _, err := conn.Exec(context.Background(), stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
}

// fetchArgs are FetchJobs' arguments for the attempts of claimed: their
// jobs, attempts, handlers, events, partitions and lease times.
func fetchArgs(claimed []queries.ClaimJobsRow) []any {
	var ids, events []int64
	var attempts []int32
	var handlers []string
	var parts, leased []time.Time
	for _, j := range claimed {
		ids, events, attempts = append(ids, j.ID), append(events, j.EventID), append(attempts, j.AttemptCount)
		handlers, parts, leased = append(handlers, j.Handler), append(parts, j.EventReceivedAt), append(leased, j.AttemptedAt)
	}
	return []any{ids, attempts, handlers, events, parts, leased}
}

// nestedPlans stops auto_explain's messages to conn and returns the plans it
// printed of the statements the function fn ran (not of the call itself).
func nestedPlans(t *testing.T, conn *pgx.Conn, messages func() []string, fn string) []string {
	t.Helper()
	if _, err := conn.Exec(context.Background(), `RESET client_min_messages`); err != nil {
		t.Fatal(err)
	}
	var plans []string
	for _, n := range messages() {
		if strings.Contains(n, "Query Text:") && !strings.Contains(n, "webhook_ingress."+fn+"(") {
			plans = append(plans, n)
		}
	}
	return plans
}

// fetchAll runs FetchJobs for the attempts of claimed and returns how many
// it read, failing the test if the statement fails.
func fetchAll(t *testing.T, conn *pgx.Conn, claimed []queries.ClaimJobsRow) int {
	t.Helper()
	rows, err := conn.Query(context.Background(), schema.Query("FetchJobs"), fetchArgs(claimed)...)
	if err != nil {
		t.Fatal(err)
	}
	read := 0
	for rows.Next() {
		read++
	}
	if rows.Close(); rows.Err() != nil {
		t.Fatalf("fetch: %v", rows.Err())
	}
	return read
}
