package schema_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/schema"
)

// TestBuildIndexesIgnoresALockTimeout: a lock_timeout of the session does
// not cancel the concurrent builds, and is put back after.
//
// Regression test (review helper-109; fixed: the text describes the
// behaviour before the fix). BuildIndexes turns statement_timeout off for its CREATE INDEX
// CONCURRENTLY builds (a setting of the role or database meant for the
// services "would cancel it on every run, leaving an INVALID index dropped
// and built again each time": schema/indexes.go:62-80, review helper-75), but
// not lock_timeout, which does the same: a concurrent build waits, through
// lock waits, for every transaction older than it (the writers of the
// partition, then every older snapshot), and a lock_timeout shorter than the
// longest such transaction (here a 1 s lock_timeout and a 3 s report in
// REPEATABLE READ, as an auditor's or pg_dump's) cancels it: inlet migrate
// fails, leaves an INVALID index, drops and rebuilds it next run, and fails
// again as long as the log has a transaction longer than the timeout. The
// payload index stays invalid (--where scans every such partition).
//
// Expected: BuildIndexes waits for the older transaction and builds the
// index, as it does under a statement_timeout; the session's setting is put
// back after.
func TestBuildIndexesIgnoresALockTimeout(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, conn := migratedTo(t, 11)
	if _, err := conn.Exec(ctx, `INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, event_type, raw_body, signature_verified)
		SELECT 'stripe', 'stripe', 'evt_' || n, 'charge.succeeded', convert_to(format('{"id":"evt_%s"}', n), 'UTF8'), true
		FROM generate_series(1, 12000) n`); err != nil {
		t.Fatal(err)
	}
	if _, err := schema.MigrateTo(ctx, conn, 12); err != nil {
		t.Fatal(err)
	}
	if p, err := schema.PendingIndexes(ctx, conn); err != nil || len(p) != 1 {
		t.Fatalf("pending %+v (%v), want the large partition's payload index", p, err)
	}

	// A report running for 3 s, started before the build.
	reader, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close(context.Background())
	tx, err := reader.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SET TRANSACTION ISOLATION LEVEL REPEATABLE READ`); err != nil {
		t.Fatal(err)
	}
	var n int64
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM webhook_ingress.events`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	ended := make(chan struct{})
	go func() { // the only user of tx and reader from here on
		defer close(ended)
		time.Sleep(3 * time.Second)
		_ = tx.Rollback(context.Background())
	}()
	defer func() { <-ended }()

	// A lock_timeout meant for the services (on the role or the database;
	// here on the session, as for the statement_timeout test).
	if _, err := conn.Exec(ctx, `SET lock_timeout = '1s'`); err != nil {
		t.Fatal(err)
	}
	built, err := schema.BuildIndexes(ctx, conn, nil, nil)
	if err != nil || len(built) != 1 {
		t.Fatalf("built %+v (%v) under a 1 s lock_timeout with a 3 s transaction open, want the pending index built", built, err)
	}
	var lt string
	if err := conn.QueryRow(ctx, `SHOW lock_timeout`).Scan(&lt); err != nil || lt != "1s" {
		t.Fatalf("lock_timeout after the builds = %q (%v), want the session's 1s back", lt, err)
	}
}
