package database_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/internal/database"
	"github.com/inlet-dev/inlet/internal/pgtest"
	"github.com/inlet-dev/inlet/schema"
)

// The readiness of the services that write (ingress; streamer and consumer
// run the same schema.CheckWritable) fails with schema.ErrReadOnly on a
// database that takes no writes, while schema.Check, for callers that only
// read, still passes. Before the fix (review helper-200) Ready ran
// schema.Check alone and said ready on a read-only database, while every
// insert, claim and outcome failed with SQLSTATE 25006.
func TestReadyFailsOnReadOnlyDatabase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	open := func() func(context.Context) error {
		pool, err := database.Open(ctx, url, database.Options{Role: "webhook_worker", MaxConns: 1, AppName: "readonly-test"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		return database.Ready(pool)
	}
	if err := open()(ctx); err != nil {
		t.Fatalf("Ready on a writable database: %v", err)
	}

	// default_transaction_read_only, as a managed server at a full disk
	// sets it; a standby's transaction_read_only is on the same way.
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET default_transaction_read_only = on', current_database()); END $$`); err != nil {
		t.Fatal(err)
	}
	ready := open() // a new pool: the setting applies to new sessions
	err = ready(ctx)
	if !errors.Is(err, schema.ErrReadOnly) {
		t.Fatalf("Ready on a read-only database: %v, want schema.ErrReadOnly", err)
	}
	ro, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close(ctx)
	if err := schema.Check(ctx, ro); err != nil {
		t.Fatalf("schema.Check (readers) on a read-only but current database: %v, want nil", err)
	}
	if err := schema.CheckWritable(ctx, ro); !errors.Is(err, schema.ErrReadOnly) {
		t.Fatalf("schema.CheckWritable on a read-only database: %v, want schema.ErrReadOnly", err)
	}
}
