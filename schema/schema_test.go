package schema_test

import (
	"context"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inlet-dev/inlet/internal/pgtest"
	"github.com/inlet-dev/inlet/schema"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// migratedTo is a new empty database migrated up to version, for a test of
// a later migration's upgrade: its URL and a connection to it (closed when
// the test ends).
func migratedTo(t *testing.T, version int) (string, *pgx.Conn) {
	t.Helper()
	ctx := context.Background()
	url := pgtest.NewEmptyDatabase(t)
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	if _, err := schema.MigrateTo(ctx, conn, version); err != nil {
		t.Fatalf("migrate to %d: %v", version, err)
	}
	return url, conn
}

func TestMigrateIsIdempotent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pgtest.NewEmptyDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)

	if err := schema.Check(ctx, conn); err == nil {
		t.Fatal("Check on an empty database: want an error")
	}
	applied, err := schema.Migrate(ctx, conn)
	if err != nil {
		t.Fatalf("first migrate: %v", err)
	}
	if len(applied) != schema.Latest() || schema.Latest() == 0 {
		t.Fatalf("first migrate applied %d migrations, want %d", len(applied), schema.Latest())
	}
	again, err := schema.Migrate(ctx, conn)
	if err != nil {
		t.Fatalf("second migrate: %v", err)
	}
	if len(again) != 0 {
		t.Fatalf("second migrate applied %d migrations, want none", len(again))
	}
	if err := schema.Check(ctx, conn); err != nil {
		t.Fatalf("Check after migrate: %v", err)
	}
}

func TestQueriesLoad(t *testing.T) {
	t.Parallel()
	if q := schema.Query("InsertEvent"); !strings.Contains(q, "INSERT INTO webhook_ingress.events") {
		t.Fatalf("InsertEvent = %q", q)
	}
	defer func() {
		if recover() == nil {
			t.Fatal("Query of an unknown name did not panic")
		}
	}()
	schema.Query("NoSuchQuery")
}

// asRole runs f in a transaction with SET LOCAL ROLE role, rolled back after.
func asRole(t *testing.T, pool *pgxpool.Pool, role string, f func(tx pgx.Tx) error) error {
	t.Helper()
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if role != "" {
		if _, err := tx.Exec(ctx, "SET LOCAL ROLE "+role); err != nil {
			t.Fatalf("set role %s: %v", role, err)
		}
	}
	return f(tx)
}

func exec(sql string, args ...any) func(pgx.Tx) error {
	return func(tx pgx.Tx) error {
		_, err := tx.Exec(context.Background(), sql, args...)
		return err
	}
}

func query(sql string) func(pgx.Tx) error {
	return func(tx pgx.Tx) error {
		rows, err := tx.Query(context.Background(), sql)
		if err != nil {
			return err
		}
		rows.Close()
		return rows.Err()
	}
}

const insertEvent = `INSERT INTO webhook_ingress.events
    (provider, scheme, external_event_id, event_type, headers, raw_body, signature_verified)
    VALUES ('stripe', 'stripe', $1, 'invoice.paid', '{}', '\x7b7d', true)`

func seed(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `INSERT INTO webhook_ingress.subscriptions (handler) VALUES ('audit-log')`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, insertEvent, "evt_seed"); err != nil {
		t.Fatal(err)
	}
}

func isPermissionDenied(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "42501"
}

func TestPrivileges(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	seed(t, pool)

	cases := []struct {
		role  string
		what  string
		do    func(pgx.Tx) error
		allow bool
	}{
		{"webhook_ingress_writer", "insert an event", exec(insertEvent, "evt_ingress"), true},
		{"webhook_ingress_writer", "insert a duplicate event", exec(insertEvent, "evt_seed"), true},
		{"webhook_ingress_writer", "read dedupe keys", query(`SELECT * FROM webhook_ingress.event_keys`), false},
		{"webhook_ingress_writer", "create a partition", exec(`SELECT webhook_ingress.create_partitions('day', 1)`), false},
		{"webhook_ingress_writer", "read raw_body", query(`SELECT raw_body FROM webhook_ingress.events`), false},
		{"webhook_ingress_writer", "read headers", query(`SELECT headers FROM webhook_ingress.events`), false},
		{"webhook_ingress_writer", "read event ids", query(`SELECT id FROM webhook_ingress.events`), false},
		{"webhook_ingress_writer", "read jobs", query(`SELECT id FROM webhook_ingress.jobs`), false},
		{"webhook_ingress_writer", "insert a job", exec(`INSERT INTO webhook_ingress.jobs (event_id, event_received_at, handler, provider) SELECT 1, now(), 'x', 'stripe'`), false},
		{"webhook_ingress_writer", "add a subscription", exec(`INSERT INTO webhook_ingress.subscriptions (handler) VALUES ('evil')`), false},
		{"webhook_ingress_writer", "read schema version", query(`SELECT max(version) FROM webhook_ingress.schema_migrations`), true},

		{"webhook_streamer", "read event metadata", query(`SELECT id, provider, external_event_id, event_type, received_at FROM webhook_ingress.events`), true},
		{"webhook_streamer", "read raw_body", query(`SELECT raw_body FROM webhook_ingress.events`), false},
		{"webhook_streamer", "read headers", query(`SELECT headers FROM webhook_ingress.events`), false},
		{"webhook_streamer", "insert an event", exec(insertEvent, "evt_streamer"), false},
		{"webhook_streamer", "lease a job", exec(`UPDATE webhook_ingress.jobs SET status = 'leased', lease_holder_id = 's1', lease_expires_at = now(), attempt_count = attempt_count + 1`), true},
		{"webhook_streamer", "repoint a job at another handler", exec(`UPDATE webhook_ingress.jobs SET handler = 'other'`), false},
		{"webhook_streamer", "delete a job", exec(`DELETE FROM webhook_ingress.jobs`), false},
		// The reporter runs as the streamer: it reads the two tables, not the view.
		{"webhook_streamer", "read attempt metadata in both places", query(`SELECT a.id, a.outcome, j.completed_attempt_id, j.attempt_count, j.completed_at
			FROM webhook_ingress.job_attempts a, webhook_ingress.jobs j`), true},
		{"webhook_streamer", "read the view attempts", query(`SELECT * FROM webhook_ingress.attempts`), false},
		{"webhook_streamer", "draw an attempt id", query(`SELECT nextval('webhook_ingress.job_attempts_id_seq')`), false},

		{"webhook_worker", "read raw_body", query(`SELECT raw_body, headers FROM webhook_ingress.events`), true},
		{"webhook_worker", "insert an event", exec(insertEvent, "evt_worker"), false},
		{"webhook_worker", "complete a job", exec(`UPDATE webhook_ingress.jobs SET status = 'completed', completed_at = now(), updated_at = now()`), true},
		// 010_lease_token: the success stays on the job row, under an id
		// drawn from job_attempts' sequence.
		{"webhook_worker", "complete a job keeping its attempt", exec(`UPDATE webhook_ingress.jobs SET status = 'completed', completed_at = now(),
			completed_attempt_id = nextval('webhook_ingress.job_attempts_id_seq'), worker_id = 'c1', lease_holder_id = NULL, lease_expires_at = NULL, updated_at = now()`), true},
		{"webhook_worker", "draw an attempt id", query(`SELECT nextval('webhook_ingress.job_attempts_id_seq')`), true},
		{"webhook_worker", "move the attempt id sequence", query(`SELECT setval('webhook_ingress.job_attempts_id_seq', 1)`), false},
		{"webhook_worker", "record an attempt under a chosen id", exec(`INSERT INTO webhook_ingress.job_attempts (id, job_id, event_received_at, attempt, started_at, outcome)
			OVERRIDING SYSTEM VALUE SELECT 1000, id, event_received_at, 1, now(), 'failed' FROM webhook_ingress.jobs`), false},
		{"webhook_worker", "read the view attempts", query(`SELECT * FROM webhook_ingress.attempts`), false},
		{"webhook_worker", "change a job's event", exec(`UPDATE webhook_ingress.jobs SET event_id = event_id`), false},
		{"webhook_worker", "change a job's attempt count", exec(`UPDATE webhook_ingress.jobs SET attempt_count = 0`), false},
		{"webhook_worker", "record an attempt", exec(`INSERT INTO webhook_ingress.job_attempts (job_id, event_received_at, attempt, started_at, outcome) SELECT id, event_received_at, 1, now(), 'completed' FROM webhook_ingress.jobs`), true},
		{"webhook_worker", "rewrite attempt history", exec(`UPDATE webhook_ingress.job_attempts SET outcome = 'completed'`), false},
		{"webhook_worker", "register a subscription", exec(`INSERT INTO webhook_ingress.subscriptions (handler, provider_pattern) VALUES ('billing', 'stripe')`), true},
		{"webhook_worker", "delete a job", exec(`DELETE FROM webhook_ingress.jobs`), false},

		{"webhook_auditor", "read everything", query(`SELECT e.raw_body, e.headers, j.*, a.* FROM webhook_ingress.events e, webhook_ingress.jobs j, webhook_ingress.job_attempts a, webhook_ingress.subscriptions s`), true},
		{"webhook_auditor", "read every finished attempt", query(`SELECT * FROM webhook_ingress.attempts`), true},
		{"webhook_auditor", "draw an attempt id", query(`SELECT nextval('webhook_ingress.job_attempts_id_seq')`), false},
		{"webhook_auditor", "insert an event", exec(insertEvent, "evt_auditor"), false},
		{"webhook_auditor", "update a job", exec(`UPDATE webhook_ingress.jobs SET status = 'pending'`), false},
		{"webhook_auditor", "add a subscription", exec(`INSERT INTO webhook_ingress.subscriptions (handler) VALUES ('x')`), false},
		{"webhook_auditor", "insert an attempt", exec(`INSERT INTO webhook_ingress.job_attempts (job_id, event_received_at, attempt, started_at, outcome) VALUES (1, now(), 1, now(), 'completed')`), false},
		{"webhook_auditor", "read the retention record", query(`SELECT * FROM webhook_ingress.retention_log`), true},
		{"webhook_auditor", "drop a partition", exec(`SELECT webhook_ingress.drop_partition(now())`), false},

		{"webhook_operator", "read everything", query(`SELECT e.raw_body, e.headers, e.request_uri, j.*, a.*, s.* FROM webhook_ingress.events e, webhook_ingress.jobs j, webhook_ingress.job_attempts a, webhook_ingress.subscriptions s`), true},
		{"webhook_operator", "read schema version", query(`SELECT max(version) FROM webhook_ingress.schema_migrations`), true},
		{"webhook_operator", "requeue a job", exec(`UPDATE webhook_ingress.jobs SET status = 'pending', attempt_count = 0, next_attempt_at = now(),
			lease_holder_id = NULL, lease_expires_at = NULL, worker_id = NULL, last_error = NULL, last_error_class = NULL,
			completed_at = NULL, updated_at = now()`), true},
		{"webhook_operator", "lock a job for replay", query(`SELECT id FROM webhook_ingress.jobs FOR UPDATE`), true},
		{"webhook_operator", "create a job for a late handler", exec(`INSERT INTO webhook_ingress.jobs (event_id, event_received_at, handler, provider, event_type, max_attempts)
			SELECT id, received_at, 'late', provider, event_type, 25 FROM webhook_ingress.events`), true},
		{"webhook_operator", "record a replay", exec(`INSERT INTO webhook_ingress.job_attempts (job_id, event_received_at, attempt, worker_id, started_at, finished_at, outcome)
			SELECT id, event_received_at, attempt_count, session_user, now(), now(), 'replayed' FROM webhook_ingress.jobs`), true},
		{"webhook_operator", "read every finished attempt", query(`SELECT * FROM webhook_ingress.attempts`), true},
		// A replay archives a job's success under the id it had on the job row.
		{"webhook_operator", "archive a success and re-queue its job", exec(`WITH r AS (
				UPDATE webhook_ingress.jobs SET status = 'pending', completed_attempt_id = NULL, completed_at = NULL, worker_id = NULL, updated_at = now()
				RETURNING id, event_received_at)
			INSERT INTO webhook_ingress.job_attempts (id, job_id, event_received_at, attempt, worker_id, started_at, finished_at, outcome)
			OVERRIDING SYSTEM VALUE SELECT 1000 + id, id, event_received_at, 1, 'c1', now(), now(), 'completed' FROM r`), true},
		{"webhook_operator", "draw an attempt id", query(`SELECT nextval('webhook_ingress.job_attempts_id_seq')`), false},
		{"webhook_operator", "change an event", exec(`UPDATE webhook_ingress.events SET raw_body = '\x00'`), false},
		{"webhook_operator", "insert an event", exec(insertEvent, "evt_operator"), false},
		{"webhook_operator", "delete a job", exec(`DELETE FROM webhook_ingress.jobs`), false},
		{"webhook_operator", "truncate jobs", exec(`TRUNCATE webhook_ingress.jobs`), false},
		{"webhook_operator", "repoint a job at another handler", exec(`UPDATE webhook_ingress.jobs SET handler = 'other'`), false},
		{"webhook_operator", "change a job's event", exec(`UPDATE webhook_ingress.jobs SET event_id = event_id`), false},
		{"webhook_operator", "raise a job's max attempts", exec(`UPDATE webhook_ingress.jobs SET max_attempts = 1000`), false},
		{"webhook_operator", "create a job already finished", exec(`INSERT INTO webhook_ingress.jobs (event_id, event_received_at, handler, provider, status)
			SELECT id, received_at, 'forged', provider, 'completed' FROM webhook_ingress.events`), false},
		{"webhook_operator", "drop a partition", exec(`SELECT webhook_ingress.drop_partition(now())`), false},
		{"webhook_operator", "forget a dedupe key", exec(`DELETE FROM webhook_ingress.event_keys`), false},
		{"webhook_operator", "truncate a partition", exec(`TRUNCATE webhook_ingress.events_default`), false},
		{"webhook_operator", "rewrite attempt history", exec(`UPDATE webhook_ingress.job_attempts SET outcome = 'completed'`), false},
		{"webhook_operator", "delete attempt history", exec(`DELETE FROM webhook_ingress.job_attempts`), false},
		{"webhook_operator", "record an error text", exec(`INSERT INTO webhook_ingress.job_attempts (job_id, event_received_at, attempt, started_at, outcome, error)
			SELECT id, event_received_at, 1, now(), 'replayed', 'x' FROM webhook_ingress.jobs`), false},
		{"webhook_operator", "add a subscription", exec(`INSERT INTO webhook_ingress.subscriptions (handler) VALUES ('x')`), false},
		{"webhook_operator", "switch a subscription off", exec(`UPDATE webhook_ingress.subscriptions SET enabled = false, updated_at = now()`), true},
		{"webhook_operator", "change a subscription's patterns", exec(`UPDATE webhook_ingress.subscriptions SET provider_pattern = 'x'`), false},
	}
	for _, c := range cases {
		err := asRole(t, pool, c.role, c.do)
		switch {
		case c.allow && err != nil:
			t.Errorf("%s may %s, but: %v", c.role, c.what, err)
		case !c.allow && err == nil:
			t.Errorf("%s must not %s, but it succeeded", c.role, c.what)
		case !c.allow && !isPermissionDenied(err):
			t.Errorf("%s %s: want permission denied (42501), got %v", c.role, c.what, err)
		}
	}
}

func TestEventsAreAppendOnlyForEveryRole(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	seed(t, pool)
	// "" is the owner/superuser itself: the triggers stop it too.
	roles := []string{"", "webhook_ingress_writer", "webhook_streamer", "webhook_worker", "webhook_auditor", "webhook_operator"}
	stmts := map[string]string{
		"UPDATE":   `UPDATE webhook_ingress.events SET event_type = 'forged'`,
		"DELETE":   `DELETE FROM webhook_ingress.events`,
		"TRUNCATE": `TRUNCATE webhook_ingress.events CASCADE`,
		// A partition is a table of its own; it is guarded as well.
		"UPDATE a partition":   `UPDATE webhook_ingress.events_default SET event_type = 'forged'`,
		"DELETE a partition":   `DELETE FROM webhook_ingress.events_default`,
		"TRUNCATE a partition": `TRUNCATE webhook_ingress.events_default CASCADE`,
		"UPDATE a dedupe key":  `UPDATE webhook_ingress.event_keys SET event_id = 0`,
		"TRUNCATE dedupe keys": `TRUNCATE webhook_ingress.event_keys`,
	}
	if _, err := pool.Exec(context.Background(), `INSERT INTO webhook_ingress.events
		(provider, scheme, external_event_id, raw_body, signature_verified, received_at)
		VALUES ('stripe', 'stripe', 'evt_default', 'x', true, '1990-01-01')`); err != nil {
		t.Fatal(err)
	}
	for _, role := range roles {
		for op, sql := range stmts {
			if err := asRole(t, pool, role, exec(sql)); !isPermissionDenied(err) {
				t.Errorf("role %q: %s on events: want permission denied, got %v", role, op, err)
			}
		}
	}
	// Replication mode must not switch the triggers off.
	err := asRole(t, pool, "", func(tx pgx.Tx) error {
		if _, err := tx.Exec(context.Background(), "SET LOCAL session_replication_role = replica"); err != nil {
			return err
		}
		_, err := tx.Exec(context.Background(), stmts["DELETE"])
		return err
	})
	if !isPermissionDenied(err) {
		t.Errorf("DELETE with session_replication_role=replica: want permission denied, got %v", err)
	}
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM webhook_ingress.events`).Scan(&n); err != nil || n != 2 {
		t.Fatalf("events after the attempts: %d rows (%v), want 2", n, err)
	}
}

func TestFanOut(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	_, err := pool.Exec(ctx, `INSERT INTO webhook_ingress.subscriptions (handler, provider_pattern, event_type_pattern) VALUES
		('billing', 'stripe', 'invoice.*'),
		('billing', 'stripe', 'invoice.paid'),     -- overlaps: still one job
		('everything', '*', '*'),
		('github-push', 'github', 'push'),
		('literal', 'str_pe', '*')                 -- '_' is not a wildcard`)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO webhook_ingress.subscriptions (handler, enabled) VALUES ('disabled', false)`); err != nil {
		t.Fatal(err)
	}
	// Several events in one statement: the statement trigger handles them all.
	_, err = pool.Exec(ctx, `INSERT INTO webhook_ingress.events
		(provider, scheme, external_event_id, event_type, raw_body, signature_verified) VALUES
		('stripe', 'stripe', 'evt_1', 'invoice.paid', 'a', true),
		('stripe', 'stripe', 'evt_2', 'customer.created', 'b', true),
		('github', 'github', 'gh_1', 'push', 'c', true)`)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := pool.Query(ctx, `SELECT e.external_event_id || ':' || j.handler
		FROM webhook_ingress.jobs j JOIN webhook_ingress.events e ON e.id = j.event_id
		WHERE j.status = 'pending' ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"evt_1:billing", "evt_1:everything", "evt_2:everything", "gh_1:everything", "gh_1:github-push"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("jobs = %v, want %v", got, want)
	}

	// No subscriber: still stored, no job.
	if _, err := pool.Exec(ctx, `DELETE FROM webhook_ingress.subscriptions`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, insertEvent, "evt_lonely"); err != nil {
		t.Fatal(err)
	}
	var events, jobs int
	_ = pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM webhook_ingress.events WHERE external_event_id = 'evt_lonely'),
		(SELECT count(*) FROM webhook_ingress.jobs j JOIN webhook_ingress.events e ON e.id = j.event_id WHERE e.external_event_id = 'evt_lonely')`).Scan(&events, &jobs)
	if events != 1 || jobs != 0 {
		t.Fatalf("event without subscriber: %d events, %d jobs; want 1, 0", events, jobs)
	}
}

// The dedupe key holds across partitions (the same id arriving in another
// period is a duplicate) and between concurrent inserts: the second waits for
// the first and inserts nothing once it commits, or inserts after a rollback.
func TestDedupeAcrossPartitionsAndConcurrentInserts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	insertAt := `INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, raw_body, signature_verified, received_at)
		VALUES ('stripe', 'stripe', $1, 'x', true, $2)`
	now := time.Now()
	for i, at := range []time.Time{now, now.AddDate(0, 0, 8), now.AddDate(-5, 0, 0)} {
		tag, err := pool.Exec(ctx, insertAt, "evt_same", at)
		if err != nil {
			t.Fatal(err)
		}
		if want := int64(0); i == 0 {
			want = 1
			if tag.RowsAffected() != want {
				t.Fatalf("first insert: %d rows", tag.RowsAffected())
			}
		} else if tag.RowsAffected() != want {
			t.Fatalf("duplicate at %s stored %d rows, want 0", at, tag.RowsAffected())
		}
	}

	for _, commit := range []bool{true, false} {
		key := fmt.Sprintf("evt_race_%v", commit)
		first, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := first.Exec(ctx, insertAt, key, now); err != nil {
			t.Fatal(err)
		}
		second := make(chan int64, 1)
		go func() {
			tag, err := pool.Exec(ctx, insertAt, key, now.AddDate(0, 0, 8))
			if err != nil {
				t.Error(err)
			}
			second <- tag.RowsAffected()
		}()
		select {
		case n := <-second:
			t.Fatalf("concurrent insert of %s did not wait for the first (stored %d)", key, n)
		case <-time.After(200 * time.Millisecond):
		}
		want := int64(1)
		if commit {
			err, want = first.Commit(ctx), 0
		} else {
			err = first.Rollback(ctx)
		}
		if err != nil {
			t.Fatal(err)
		}
		if n := <-second; n != want {
			t.Fatalf("concurrent insert of %s after the first's %s stored %d rows, want %d",
				key, map[bool]string{true: "commit", false: "rollback"}[commit], n, want)
		}
	}
	var events, keys int
	if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM webhook_ingress.events), (SELECT count(*) FROM webhook_ingress.event_keys)`).Scan(&events, &keys); err != nil {
		t.Fatal(err)
	}
	if events != 3 || keys != 3 {
		t.Fatalf("%d events and %d keys, want 3 and 3", events, keys)
	}
}

// 005_partitions re-creates events, jobs and job_attempts partitioned: every
// row comes back with its id in the partition of its time, the identities
// continue past ids a rolled-back insert used, and dedupe and fan-out work on
// the converted tables.
func TestPartitionMigrationKeepsRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, conn := migratedTo(t, 4)
	execAll(t, conn,
		`INSERT INTO webhook_ingress.subscriptions (handler) VALUES ('h')`,
		`INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, raw_body, signature_verified, received_at) VALUES
			('stripe', 'stripe', 'evt_old', 'old', true, now() - interval '20 days'),
			('stripe', 'stripe', 'evt_new', 'new', true, now())`,
		`UPDATE webhook_ingress.jobs SET status = 'completed' WHERE event_id = 1`,
		`INSERT INTO webhook_ingress.job_attempts (job_id, attempt, started_at, outcome) SELECT id, 1, now(), 'completed' FROM webhook_ingress.jobs WHERE event_id = 1`,
		// Uses id 3 and rolls back.
		`DO $$ BEGIN INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, raw_body, signature_verified) VALUES ('stripe', 'stripe', 'evt_gone', 'x', true); RAISE EXCEPTION 'roll back'; EXCEPTION WHEN raise_exception THEN END $$`,
	)
	if _, err := schema.Migrate(ctx, conn); err != nil {
		t.Fatal(err)
	}
	type row struct {
		ID                     int64
		Key                    string
		BodyOK                 bool
		EventPart, Status, Job string
		Attempts               int64
	}
	rows, err := conn.Query(ctx, `SELECT e.id, e.external_event_id, e.body_sha256 = sha256(e.raw_body),
			substring(e.tableoid::regclass::text FROM '_(p[0-9]+|default)$'), j.status,
			substring(j.tableoid::regclass::text FROM '_(p[0-9]+|default)$'),
			(SELECT count(*) FROM webhook_ingress.job_attempts a WHERE a.job_id = j.id)
		FROM webhook_ingress.events e JOIN webhook_ingress.jobs j ON j.event_id = e.id ORDER BY e.id`)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[row])
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("rows after the migration: %+v", got)
	}
	for i, want := range []row{{ID: 1, Key: "evt_old", Status: "completed", Attempts: 1}, {ID: 2, Key: "evt_new", Status: "pending"}} {
		g := got[i]
		if g.ID != want.ID || g.Key != want.Key || !g.BodyOK || g.Status != want.Status || g.Attempts != want.Attempts ||
			g.EventPart == "default" || g.EventPart != g.Job {
			t.Fatalf("row %d after the migration: %+v; want %+v in one period partition", i, g, want)
		}
	}
	if got[0].EventPart == got[1].EventPart {
		t.Fatalf("events 20 days apart in one partition %s", got[0].EventPart)
	}
	var dup, next int64
	tag, err := conn.Exec(ctx, `INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, raw_body, signature_verified) VALUES ('stripe', 'stripe', 'evt_old', 'again', true)`)
	if err != nil {
		t.Fatal(err)
	}
	dup = tag.RowsAffected()
	if err := conn.QueryRow(ctx, `INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, raw_body, signature_verified) VALUES ('stripe', 'stripe', 'evt_after', 'x', true) RETURNING id`).Scan(&next); err != nil {
		t.Fatal(err)
	}
	var jobs int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM webhook_ingress.jobs WHERE event_id = $1`, next).Scan(&jobs); err != nil {
		t.Fatal(err)
	}
	if dup != 0 || next <= 3 || jobs != 1 {
		t.Fatalf("after the migration: duplicate stored %d rows, next id %d (want > 3), %d jobs for it", dup, next, jobs)
	}
}

// The auditor query of docs/database.md runs as webhook_auditor and answers
// what it says.
func TestDocsAuditorQuery(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	doc, err := os.ReadFile("../docs/database.md")
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(doc), "<!-- auditor-query")
	if !ok {
		t.Fatal("docs/database.md has no auditor-query block")
	}
	_, after, _ = strings.Cut(after, "```sql\n")
	sql, _, ok := strings.Cut(after, "```")
	if !ok || sql == "" {
		t.Fatal("docs/database.md's auditor-query block has no SQL")
	}
	pool := pgtest.NewPool(t)
	for _, q := range []string{
		`INSERT INTO webhook_ingress.subscriptions (handler, provider_pattern) VALUES ('billing', 'stripe'), ('ledger', '*')`,
		`INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, event_type, raw_body, signature_verified, received_at) VALUES
			('stripe', 'stripe', 'evt_tue', 'invoice.paid', '{}', true, '2026-11-24T10:00:00Z'),
			('stripe', 'stripe', 'evt_wed', 'invoice.paid', '{}', true, '2026-11-25T10:00:00Z'),
			('github', 'github', 'gh_tue', 'push', '{}', true, '2026-11-24T11:00:00Z')`,
		`INSERT INTO webhook_ingress.job_attempts (job_id, event_received_at, attempt, started_at, outcome, error_class)
			SELECT id, event_received_at, 1, event_received_at, 'failed', 'timeout' FROM webhook_ingress.jobs WHERE handler = 'billing'`,
		// The second attempt succeeded: kept on the job row (010_lease_token).
		`UPDATE webhook_ingress.jobs SET status = 'completed', attempt_count = 2, attempted_at = event_received_at + interval '1 minute',
			completed_at = event_received_at + interval '61 seconds', worker_id = 'c2',
			completed_attempt_id = nextval('webhook_ingress.job_attempts_id_seq') WHERE handler = 'billing'`,
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	var got []string
	err = asRole(t, pool, "webhook_auditor", func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, sql)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			v, err := rows.Values()
			if err != nil {
				return err
			}
			// external id, handler, outcome, attempt, consumer; a success
			// also its completion time.
			row := fmt.Sprintf("%v %v %v %v %v", v[1], v[6], v[10], v[9], v[12])
			if v[10] == "completed" {
				row += " " + v[14].(time.Time).UTC().Format(time.RFC3339)
			}
			got = append(got, row)
		}
		return rows.Err()
	})
	if err != nil {
		t.Fatalf("the auditor query of docs/database.md as webhook_auditor: %v", err)
	}
	if want := "evt_tue billing failed 1 <nil>|evt_tue billing completed 2 c2 2026-11-24T10:01:01Z|evt_tue ledger <nil> <nil> <nil>"; strings.Join(got, "|") != want {
		t.Fatalf("auditor query rows %q, want %q", strings.Join(got, "|"), want)
	}
	// Only that day's partitions are read: the day is in no period partition
	// of this database (they start at its creation), so the plan names none.
	var plan []string
	err = asRole(t, pool, "webhook_auditor", func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, "EXPLAIN (COSTS OFF) "+sql)
		if err != nil {
			return err
		}
		plan, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if p := strings.Join(plan, "\n"); !strings.Contains(p, "jobs_default") || regexp.MustCompile(`_p[0-9]{8}\b`).MatchString(p) {
		t.Fatalf("the auditor query reads other periods' partitions:\n%s", p)
	}
}

// The statements sqlc generated are the ones in the .sql files (sqlc
// rewrites a SELECT * into the column names it infers, which need not be
// PostgreSQL's), parameters aside: sqlc numbers named ones itself. Comment
// lines aside too: sqlc moves them to the method's doc.
func TestQueryMatchesSQLC(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("queries/*.sql.go")
	if err != nil || len(files) == 0 {
		t.Fatalf("no generated files: %v", err)
	}
	raw, err := schema.LoadQueries(os.DirFS("."))
	if err != nil {
		t.Fatal(err)
	}
	param := regexp.MustCompile(`sqlc\.n?arg\([a-z_0-9]+\)|\$[0-9]+`)
	strip := func(sql string) string {
		var keep []string
		for _, l := range strings.Split(sql, "\n") {
			if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "--") {
				keep = append(keep, l)
			}
		}
		return param.ReplaceAllString(strings.Join(keep, "\n"), "$?")
	}
	n := 0
	for _, f := range files {
		file, err := parser.ParseFile(token.NewFileSet(), f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range file.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.CONST {
				continue
			}
			for _, spec := range g.Specs {
				v := spec.(*ast.ValueSpec)
				lit, ok := v.Values[0].(*ast.BasicLit)
				if !ok {
					continue
				}
				text, err := strconv.Unquote(lit.Value)
				if err != nil {
					t.Fatal(err)
				}
				name := v.Names[0].Name
				n++
				if got, want := strip(raw[name]), strip(text); got != want {
					t.Errorf("query %s differs from sqlc's text in %s:\n%s\n--- sqlc:\n%s", name, f, got, want)
				}
			}
		}
	}
	if n != len(raw) {
		t.Fatalf("found %d generated queries, want %d", n, len(raw))
	}
}
