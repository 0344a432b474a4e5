package tests

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/internal/natstest"
	"github.com/inlet-dev/inlet/internal/pgtest"
)

// TestConsumerBeforeFirstMigrateWaits (review helper-341, fixed).
// Defect: bcfc394 made inlet consumer wait, not ready, when it starts before
// inlet migrate ("as ingress and the streamer do"), but awaitSchema
// (cmd/inlet/services.go) waits out only schema.ErrSchemaNotCurrent: on a
// database that inlet migrate has not yet touched (a first install whose
// services start beside the migration Job, or a new database for an
// existing fleet) schema.Check fails with "relation
// webhook_ingress.schema_migrations does not exist", awaitSchema returns
// true, svc.Start registers against no schema and the process exits 1: the
// same crash loop (CrashLoopBackOff, restarts up to 5 min apart) that
// helper-339 reported. ingress and the streamer of this binary, started on
// the same empty database, stay up, not ready (checked in this run: both
// running after 8 s, the streamer logging "relation webhook_ingress.jobs
// does not exist" and retrying). deployments/kubernetes/migrate-job.yaml:
// "Services started before it finishes report not ready ... until it has".
// Setup: an empty database (no webhook_ingress schema); real NATS; inlet
// consumer (one log handler) started; 10 s later inlet migrate, then
// streamer and ingress; 3 signed GitHub webhooks.
// Expected: the consumer is still running when inlet migrate runs, starts
// once the schema is current, and the 3 jobs complete within 90 s.
// Observed: exit status 1 within ~1 s: `inlet: start consumers: register
// subscriptions: upsert subscription of handler "plain" to ("*", "*"):
// ERROR: relation "webhook_ingress.subscriptions" does not exist (SQLSTATE
// 42P01)`.
// Fixed: awaitSchema waits out any failed check (each different failure
// logged once) and returns false once ctx ended, also during a check.
func TestConsumerBeforeFirstMigrateWaits(t *testing.T) {
	t.Parallel()
	nats := natstest.Start(t)
	dbURL := pgtest.NewEmptyDatabase(t)
	env := cleanEnv("DATABASE_URL=" + dbURL)
	cfg, addr := r339Config(t, nats.URL())
	c := start(t, env, "consumer", "--config", cfg)
	select {
	case <-c.done:
		t.Fatalf("inlet consumer started before the first inlet migrate exited (%v) instead of waiting, not ready, "+
			"as ingress and the streamer do; its stderr:\n%s", c.err, lastLines(c.errOut(), 3))
	case <-time.After(10 * time.Second):
	}
	if out, errOut, code := runInlet(t, env, "migrate"); code != 0 {
		t.Fatalf("inlet migrate: exit %d\n%s%s", code, out, errOut)
	}
	s := start(t, env, "streamer", "--config", cfg)
	s.waitLog("streamer started", 60*time.Second)
	ing := start(t, env, "ingress", "--config", cfg)
	ing.waitLog("ingress listening", 60*time.Second)
	c.waitLog("consumers started", 60*time.Second)
	const n = 3
	for i := range n {
		sendGitHub(t, "http://"+addr, "r339-secret", fmt.Sprintf("r341-fresh-%d", i), []byte(`{"zen":"r341"}`))
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	deadline := time.Now().Add(90 * time.Second)
	var completed int
	for {
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM webhook_ingress.jobs WHERE handler = 'plain' AND status = 'completed'`).Scan(&completed); err != nil {
			t.Fatal(err)
		}
		if completed == n || time.Now().After(deadline) {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	if completed != n {
		t.Fatalf("%d of %d jobs completed within 90 s of the migration", completed, n)
	}
}

// TestConsumerWaitSurvivesADatabaseBlip (review helper-341, fixed).
// Defect: the same root cause as TestConsumerBeforeFirstMigrateWaits
// (cmd/inlet/services.go:awaitSchema waits out only ErrSchemaNotCurrent):
// inlet consumer waiting for inlet migrate exits 1 as soon as one schema
// check fails for another reason, e.g. the database not accepting
// connections for a moment (a restart or failover in the same maintenance
// window as the migration). Its --help says /readyz answers 503 "while the
// database does not answer"; ingress and the streamer ride such a blip out.
// Setup: a migrated database with its last schema_migrations row removed
// (not current); inlet consumer waiting ("waiting for inlet migrate"); the
// database then refuses new connections (ALLOW_CONNECTIONS false) and the
// consumer's sessions are ended, for 6 s; then connections are allowed and
// the row is put back (as inlet migrate would).
// Expected: the consumer keeps waiting and logs "consumers started".
// Observed: exit status 1 within the blip (`inlet: start consumers: ...
// database ... is not currently accepting connections` or the terminated
// connection's error).
// Fixed: awaitSchema waits out any failed check (each different failure
// logged once) and returns false once ctx ended, also during a check.
func TestConsumerWaitSurvivesADatabaseBlip(t *testing.T) {
	t.Parallel()
	nats := natstest.Start(t)
	dbURL := pgtest.NewDatabase(t)
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	var version int
	var name, db string
	if err := admin.QueryRow(ctx, `DELETE FROM webhook_ingress.schema_migrations
		WHERE version = (SELECT max(version) FROM webhook_ingress.schema_migrations)
		RETURNING version, name, current_database()`).Scan(&version, &name, &db); err != nil {
		t.Fatal(err)
	}
	env := cleanEnv("DATABASE_URL=" + dbURL)
	cfg, _ := r339Config(t, nats.URL())
	c := start(t, env, "consumer", "--config", cfg)
	c.waitLog("waiting for inlet migrate", 60*time.Second)

	// ALTER DATABASE … ALLOW_CONNECTIONS from another database of the cluster.
	ocfg, err := pgx.ParseConfig(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	ocfg.Database = "postgres"
	other, err := pgx.ConnectConfig(ctx, ocfg)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close(ctx)
	if _, err := other.Exec(ctx, `ALTER DATABASE `+pgx.Identifier{db}.Sanitize()+` ALLOW_CONNECTIONS false`); err != nil {
		t.Fatal(err)
	}
	if _, err := other.Exec(ctx, `SELECT pg_catalog.pg_terminate_backend(pid) FROM pg_catalog.pg_stat_activity
		WHERE datname = $1 AND application_name = 'inlet-consumer'`, db); err != nil {
		t.Fatal(err)
	}
	select {
	case <-c.done:
	case <-time.After(6 * time.Second):
	}
	if _, err := other.Exec(ctx, `ALTER DATABASE `+pgx.Identifier{db}.Sanitize()+` ALLOW_CONNECTIONS true`); err != nil {
		t.Fatal(err)
	}
	select {
	case <-c.done:
		t.Fatalf("inlet consumer waiting for inlet migrate exited (%v) when the database refused connections for a moment, "+
			"instead of waiting on, not ready; its stderr:\n%s", c.err, lastLines(c.errOut(), 2))
	default:
	}
	if _, err := admin.Exec(ctx, `INSERT INTO webhook_ingress.schema_migrations (version, name) VALUES ($1, $2)`, version, name); err != nil {
		t.Fatal(err)
	}
	c.waitLog("consumers started", 60*time.Second)
}

// TestConsumerSigtermWhileCheckingSchemaExitsZero (review helper-341, fixed).
// Defect: a SIGTERM that lands while awaitSchema's schema.Check statement is
// in flight makes inlet consumer exit 1 with a misleading error instead of
// 0: the cancelled query returns context.Canceled, which is not
// ErrSchemaNotCurrent, so awaitSchema (cmd/inlet/services.go) returns true
// ("current"), runConsumer calls svc.Start with the cancelled context and
// returns its error. A SIGTERM between checks exits 0 (the select on
// ctx.Done), so the outcome depends on timing: the window is the check's
// round trip every 2 s, longer on a remote or restarting server (a
// connection set-up, up to connect_timeout 5 s) or behind a lock on
// schema_migrations. The consumer's --help promises that SIGTERM drains
// and exits; a rollout or scale-down of a consumer waiting for migrate
// then reports a failed container and an error about registering.
// Setup: a migrated database with its last schema_migrations row removed
// (the check says not current, as before this release's migrate); inlet
// consumer started and waiting ("waiting for inlet migrate"); an admin
// transaction holds ACCESS EXCLUSIVE on webhook_ingress.schema_migrations so
// that the consumer's next check is in flight (seen waiting in pg_locks);
// then SIGTERM.
// Expected: exit status 0 within 15 s, no error.
// Observed: exit status 1: `inlet: start consumers: register subscriptions:
// ... context canceled`.
// Fixed: awaitSchema waits out any failed check (each different failure
// logged once) and returns false once ctx ended, also during a check.
func TestConsumerSigtermWhileCheckingSchemaExitsZero(t *testing.T) {
	t.Parallel()
	nats := natstest.Start(t)
	dbURL := pgtest.NewDatabase(t)
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, `DELETE FROM webhook_ingress.schema_migrations
		WHERE version = (SELECT max(version) FROM webhook_ingress.schema_migrations)`); err != nil {
		t.Fatal(err)
	}
	env := cleanEnv("DATABASE_URL=" + dbURL)
	cfg, _ := r339Config(t, nats.URL())
	c := start(t, env, "consumer", "--config", cfg)
	c.waitLog("waiting for inlet migrate", 60*time.Second)

	locker, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer locker.Close(ctx)
	tx, err := locker.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `LOCK TABLE webhook_ingress.schema_migrations IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		var waiting int
		if err := admin.QueryRow(ctx, `SELECT count(*) FROM pg_catalog.pg_locks l
			JOIN pg_catalog.pg_stat_activity a ON a.pid = l.pid
			WHERE NOT l.granted AND l.relation = 'webhook_ingress.schema_migrations'::regclass
			  AND a.application_name = 'inlet-consumer'`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the consumer's schema check did not reach schema_migrations within 30 s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := c.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-c.done:
	case <-time.After(15 * time.Second):
		t.Fatal("inlet consumer did not exit within 15 s of SIGTERM while waiting for inlet migrate")
	}
	if c.err != nil {
		t.Errorf("inlet consumer stopped by SIGTERM while waiting for inlet migrate exited with %v, want status 0; its stderr:\n%s",
			c.err, lastLines(c.errOut(), 2))
	}
	if strings.Contains(c.errOut(), "start consumers") {
		t.Errorf("a SIGTERM while waiting reported a failed start:\n%s", lastLines(c.errOut(), 1))
	}
}
