package schema_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/inlet-dev/inlet/internal/pgtest"
)

// Every function that writes jobs runs with plan_cache_mode
// force_generic_plan (migration 021), so the foreign-key check of each job
// it inserts reuses one plan. A CREATE OR REPLACE that forgets the SET
// clause fails here.
func TestFanOutChecksRunGenericPlans(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// One connection; what auto_explain logs comes back as notices.
	conn, messages := connectKeepingNotices(t)

	rows, err := conn.Query(ctx, `SELECT p.oid::regprocedure::text, coalesce(p.proconfig, '{}')
		FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
		WHERE n.nspname = 'webhook_ingress' AND p.prosrc ~* 'INSERT\s+INTO\s+webhook_ingress\.jobs\M'
		ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	var funcs []string
	for rows.Next() {
		var name string
		var config []string
		if err := rows.Scan(&name, &config); err != nil {
			t.Fatal(err)
		}
		funcs = append(funcs, name)
		found := false
		for _, c := range config {
			found = found || c == "plan_cache_mode=force_generic_plan"
		}
		if !found {
			t.Errorf("%s writes jobs but runs with %v: want plan_cache_mode=force_generic_plan", name, config)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(funcs, " "), "events_fan_out()") || !strings.Contains(strings.Join(funcs, " "), "fan_out_filtered(") {
		t.Fatalf("functions that write jobs: %v; want events_fan_out and fan_out_filtered among them", funcs)
	}

	// What the server runs: auto_explain (where it is installed) shows the
	// plan of each foreign-key check that fan-out fires for a batch whose
	// events share one received_at, as a group commit's do. A generic plan
	// is printed with its parameters ($1), a custom one with the values.
	// With the partition's statistics (autovacuum analyzes a new partition
	// within its first rows) the check probes the primary key, not the
	// received_at index that every event of the batch shares.
	if _, err := conn.Exec(ctx, `LOAD 'auto_explain'`); err != nil {
		t.Logf("no auto_explain on this server (%v): the plans themselves are not checked", err)
		return
	}
	execAll(t, conn,
		`INSERT INTO webhook_ingress.subscriptions (handler, provider_pattern) VALUES ('plans', 'stripe')`,
		`INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, raw_body, signature_verified)
		 SELECT 'stripe', 'stripe', 'evt_before_' || n, '{}', true FROM generate_series(1, 1000) n`,
		`ANALYZE webhook_ingress.events`,
		`SET auto_explain.log_min_duration = 0`,
		`SET auto_explain.log_nested_statements = on`,
		`SET client_min_messages = log`,
		`INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, raw_body, signature_verified)
		 SELECT 'stripe', 'stripe', 'evt_plan_' || n, '{}', true FROM generate_series(1, 20) n`,
		`RESET client_min_messages`,
	)
	var jobs int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM webhook_ingress.jobs WHERE handler = 'plans'`).Scan(&jobs); err != nil {
		t.Fatal(err)
	}
	if jobs != 1020 {
		t.Fatalf("fan-out wrote %d jobs for 1,020 events, want 1,020", jobs)
	}
	plans := messages()
	checks := 0
	for _, p := range plans {
		if !strings.Contains(p, "FOR KEY SHARE OF x") || !strings.Contains(p, `"webhook_ingress"."events" x`) {
			continue
		}
		checks++
		if !strings.Contains(p, "$1") || !strings.Contains(p, "_pkey") {
			t.Errorf("a job's foreign-key check ran a custom plan (values, not $1) or missed the primary key:\n%s", p)
			break
		}
	}
	if checks != 20 {
		t.Fatalf("auto_explain showed %d foreign-key checks of events, want one per job (20); messages:\n%s", checks, strings.Join(plans, "\n---\n"))
	}
}

// connectKeepingNotices connects to a fresh migrated database and keeps the
// notices the server sends (auto_explain's plans, with client_min_messages
// at log); messages returns those received so far.
func connectKeepingNotices(t *testing.T) (conn *pgx.Conn, messages func() []string) {
	t.Helper()
	ctx := context.Background()
	var mu sync.Mutex
	var got []string
	cfg, err := pgx.ParseConfig(pgtest.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) {
		mu.Lock()
		got = append(got, n.Message)
		mu.Unlock()
	}
	if conn, err = pgx.ConnectConfig(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(ctx) })
	return conn, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(got)
	}
}
