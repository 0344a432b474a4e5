package schema_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/internal/database"
	"github.com/inlet-dev/inlet/internal/pgtest"
	"github.com/inlet-dev/inlet/schema"
	"github.com/inlet-dev/inlet/schema/queries"
)

// The three statements every delivered job passes through run in functions
// on generic plans (022_protocol_functions): the queries call the functions,
// each function carries plan_cache_mode=force_generic_plan, and what the
// server runs inside them is a generic plan from the first call (with the
// default mode the first five calls of a session are custom plans, printed
// with the values instead of $n), never JIT-compiled. A CREATE OR REPLACE
// that forgets a SET clause, or a query that goes back to running the
// statement itself, fails here. Each statement also prunes the partitions
// outside its bounds before starting their scans (023_protocol_window).
func TestProtocolStatementsRunGenericPlans(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	conn, messages := connectKeepingNotices(t)

	protocol := map[string]string{ // query → the function it calls
		"ClaimJobs":    "claim_jobs",
		"FetchJobs":    "fetch_jobs",
		"CompleteJobs": "complete_jobs",
	}
	signatures := map[string]string{ // the function → the signature the query calls
		"claim_jobs":    "webhook_ingress.claim_jobs(text[], bigint, text, interval, interval)",
		"fetch_jobs":    "webhook_ingress.fetch_jobs(bigint[], integer[], text[], bigint[], timestamptz[], timestamptz[])",
		"complete_jobs": "webhook_ingress.complete_jobs(bigint[], integer[], timestamptz[], timestamptz[], text)",
	}
	for query, fn := range protocol {
		var q string
		if query == "ClaimJobs" {
			q = queries.ClaimJobs // sqlc.arg names: not a schema.Query
		} else {
			q = schema.Query(query)
		}
		if !strings.Contains(q, "webhook_ingress."+fn+"(") {
			t.Errorf("query %s does not call webhook_ingress.%s:\n%s", query, fn, q)
		}
		var config []string
		if err := conn.QueryRow(ctx, `SELECT coalesce(proconfig, '{}') FROM pg_proc WHERE oid = $1::regprocedure`,
			signatures[fn]).Scan(&config); err != nil {
			t.Fatalf("function %s: %v", signatures[fn], err)
		}
		for _, want := range []string{"plan_cache_mode=force_generic_plan", "jit=off"} {
			if !slices.Contains(config, want) {
				t.Errorf("webhook_ingress.%s runs with %v: want %s", fn, config, want)
			}
		}
	}

	if _, err := conn.Exec(ctx, `LOAD 'auto_explain'`); err != nil {
		t.Logf("no auto_explain on this server (%v): the plans themselves are not checked", err)
		return
	}
	execAll(t, conn,
		// A period of history, as every installation older than a week has:
		// each statement's bounds leave it out.
		`CREATE TABLE webhook_ingress.events_p20250106 PARTITION OF webhook_ingress.events FOR VALUES FROM ('2025-01-06') TO ('2025-01-13')`,
		`CREATE TABLE webhook_ingress.jobs_p20250106 PARTITION OF webhook_ingress.jobs FOR VALUES FROM ('2025-01-06') TO ('2025-01-13')`,
		`INSERT INTO webhook_ingress.subscriptions (handler, provider_pattern) VALUES ('plans', 'stripe')`,
		`INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, raw_body, signature_verified)
		 SELECT 'stripe', 'stripe', 'evt_plan_' || n, '{}', true FROM generate_series(1, 3) n`,
		`SET auto_explain.log_min_duration = 0`,
		`SET auto_explain.log_nested_statements = on`,
		`SET auto_explain.log_verbose = on`, // the function scans' calls: unnest($1) or the array's value
		// JIT for every plan of the session, as a backlog's generic claim
		// plan (its LIMIT unknown) gets it under the default thresholds: the
		// functions' own jit = off must win.
		`SET jit = on`,
		`SET jit_above_cost = 0`,
		`SET client_min_messages = log`,
	)
	window := time.Hour // as the streamer claims between its claims over every partition
	claimed, err := queries.New(conn).ClaimJobs(ctx, queries.ClaimJobsParams{
		FullHandlers: []string{}, BatchSize: 10, LeaseHolder: "plans-streamer", LeaseFor: time.Minute, ClaimWindow: &window})
	if err != nil || len(claimed) != 3 {
		t.Fatalf("claim: %v, %d jobs leased, want 3", err, len(claimed))
	}
	if read := fetchAll(t, conn, claimed); read != 3 {
		t.Fatalf("fetch: %d attempts read, want 3", read)
	}
	fa := fetchArgs(claimed) // ids, attempts, handlers, events, partitions, lease times
	done, err := conn.Exec(ctx, schema.Query("CompleteJobs"), fa[0], fa[1], fa[4], fa[5], "plans-consumer")
	if err != nil || done.RowsAffected() != 3 {
		t.Fatalf("complete: %v, %d jobs completed, want 3", err, done.RowsAffected())
	}
	if _, err := conn.Exec(ctx, `RESET client_min_messages`); err != nil {
		t.Fatal(err)
	}

	var jitAvailable bool
	if err := conn.QueryRow(ctx, `SELECT pg_jit_available()`).Scan(&jitAvailable); err != nil {
		t.Fatal(err)
	}
	if !jitAvailable {
		t.Log("this server has no JIT: that the functions turn it off is checked in the catalog only")
	}

	// Each function's statement, as auto_explain printed it (found by a part
	// of its text only it has), with its first parameter where a custom plan
	// would print the value (and where $n is no subplan's output).
	notices := messages()
	for fn, want := range map[string][2]string{ // the statement's marker, and its first parameter as a generic plan prints it
		"claim_jobs":    {"= ANY (v_tids)", ", $3, (now() + $4)"}, // its lease (024), and the holder and length it sets
		"fetch_jobs":    {"unnest(p_handlers)", "unnest($1)"},
		"complete_jobs": {"completed_attempt_id = nextval", "unnest($1)"},
	} {
		marker := want[0]
		var plan string
		for _, n := range notices {
			if strings.Contains(n, marker) && !strings.Contains(n, "webhook_ingress."+fn+"(") {
				plan = n
			}
		}
		switch {
		case plan == "":
			t.Errorf("auto_explain printed no plan of %s's statement; messages:\n%s", fn, strings.Join(notices, "\n---\n"))
		case !strings.Contains(plan, want[1]):
			t.Errorf("%s's statement ran a custom plan (values, not %q):\n%s", fn, want[1], plan)
		case strings.Contains(plan, "JIT:"):
			t.Errorf("%s's statement was JIT-compiled:\n%s", fn, plan)
		case !strings.Contains(plan, "Subplans Removed"):
			// 023_protocol_window: the partitions outside the statement's
			// bounds (the period of history; for the read and the
			// completion also those ahead and the default) are pruned
			// before their scans start.
			t.Errorf("%s's statement started a scan of every partition (no \"Subplans Removed\"):\n%s", fn, plan)
		}
	}
}

// The claim's window (023_protocol_window): with one, a claim leases only
// jobs of events received within it of now; without (NULL), from every
// partition. Streamers of the previous version call the four-argument
// claim_jobs of 022, which must still claim over every partition, as the
// streamer role.
func TestClaimWindowAndTheFourArgumentClaim(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	admin, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	streamerPool, err := database.Open(ctx, url, database.Options{Role: schema.StreamerRole})
	if err != nil {
		t.Fatal(err)
	}
	defer streamerPool.Close()
	if _, err := admin.Exec(ctx, `INSERT INTO webhook_ingress.subscriptions (handler) VALUES ('window')`); err != nil {
		t.Fatal(err)
	}
	// An event a minute old, one two hours old, one 40 days old (before every
	// period partition: in the default partition).
	if _, err := admin.Exec(ctx, `INSERT INTO webhook_ingress.events
		(provider, scheme, external_event_id, raw_body, signature_verified, received_at)
		SELECT 'stripe', 'stripe', 'evt_window_' || n, '{}', true, now() - ago
		FROM unnest(ARRAY[interval '1 minute', interval '2 hours', interval '40 days']) WITH ORDINALITY AS a(ago, n)`); err != nil {
		t.Fatal(err)
	}
	q := queries.New(streamerPool)
	claim := func(window *time.Duration) []time.Duration {
		t.Helper()
		rows, err := q.ClaimJobs(ctx, queries.ClaimJobsParams{FullHandlers: []string{}, BatchSize: 10,
			LeaseHolder: "window-streamer", LeaseFor: time.Minute, ClaimWindow: window})
		if err != nil {
			t.Fatal(err)
		}
		var ages []time.Duration
		for _, r := range rows {
			ages = append(ages, time.Since(r.EventReceivedAt).Round(time.Hour))
		}
		slices.Sort(ages)
		return ages
	}
	hour := time.Hour
	if got := claim(&hour); !slices.Equal(got, []time.Duration{0}) {
		t.Fatalf("claim within an hour leased jobs of events %v old, want only the one a minute old", got)
	}
	threeHours := 3 * time.Hour
	if got := claim(&threeHours); !slices.Equal(got, []time.Duration{2 * time.Hour}) {
		t.Fatalf("claim within three hours leased jobs of events %v old, want the one two hours old", got)
	}
	if got := claim(nil); !slices.Equal(got, []time.Duration{40 * 24 * time.Hour}) {
		t.Fatalf("claim over every partition leased jobs of events %v old, want the one 40 days old", got)
	}

	// The previous version's call, as the streamer role: every partition.
	if _, err := admin.Exec(ctx, `UPDATE webhook_ingress.jobs SET status = 'pending', attempt_count = 0, lease_holder_id = NULL,
		lease_expires_at = NULL WHERE handler = 'window'`); err != nil {
		t.Fatal(err)
	}
	var leased int
	if err := streamerPool.QueryRow(ctx, `SELECT count(*) FROM webhook_ingress.claim_jobs('{}', 10, 'old-streamer', interval '1 minute')`).Scan(&leased); err != nil || leased != 3 {
		t.Fatalf("the four-argument claim_jobs leased %d, %v; want all 3 jobs", leased, err)
	}
}

// A generic plan estimates a bound on a parameter, not on its value: with
// the window two-sided (BETWEEN two parameters, 0.5 % of the rows by
// PostgreSQL's default) the claim read the window through the primary key
// and sorted it, 26 ms per claim of 100 with 20,000 pending. The claim must
// walk idx_jobs_claimable in (next_attempt_at, id) order and stop at its
// LIMIT, with no Sort of the pending jobs.
func TestWindowedClaimWalksTheClaimableIndexInOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	conn, messages := explaining(t)
	execAll(t, conn,
		`INSERT INTO webhook_ingress.subscriptions (handler) VALUES ('ordered-walk')`,
		`INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, raw_body, signature_verified)
		 SELECT 'stripe', 'stripe', 'evt_walk_' || n, '{}', true FROM generate_series(1, 20000) n`,
		`ANALYZE webhook_ingress.jobs`,
		`SET auto_explain.log_min_duration = 0`,
		`SET auto_explain.log_nested_statements = on`,
		`SET client_min_messages = log`,
	)
	window := time.Hour
	for range 2 { // the plan of the first call and the one kept for the session
		rows, err := queries.New(conn).ClaimJobs(ctx, queries.ClaimJobsParams{
			FullHandlers: []string{}, BatchSize: 100, LeaseHolder: "walk", LeaseFor: time.Minute, ClaimWindow: &window})
		if err != nil || len(rows) != 100 {
			t.Fatalf("claim: %v, %d leased, want 100", err, len(rows))
		}
	}
	var plans []string
	for _, n := range messages() {
		if strings.Contains(n, "FOR UPDATE OF j SKIP LOCKED") && !strings.Contains(n, "webhook_ingress.claim_jobs(") {
			plans = append(plans, n)
		}
	}
	if len(plans) != 2 {
		t.Fatalf("auto_explain printed %d plans of the claim's statement, want 2", len(plans))
	}
	for _, plan := range plans {
		if strings.Contains(plan, "Sort  (") || !strings.Contains(plan, "next_attempt_at_id_idx") {
			t.Errorf("the claim does not walk idx_jobs_claimable in order:\n%s", plan)
		}
	}
}
