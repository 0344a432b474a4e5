package schema_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/inlet-dev/inlet/internal/pgtest"
	"github.com/inlet-dev/inlet/internal/testwait"
	"github.com/inlet-dev/inlet/schema"
)

// A migration applied while webhooks arrive can deadlock with an insert, and
// PostgreSQL may pick the migration as the victim (seen in
// TestUpgradeToEventTypesWhileIngesting under a loaded CI run: 019_order_key
// failed with 40P01). Its transaction rolled back whole, so it is run again
// and applied. Here the deadlock is made on purpose: the migration locks
// table a then b, another session holds b and then asks for a, and the
// migration (whose deadlock_timeout passes first) is the one PostgreSQL
// aborts.
func TestMigrationDeadlockVictimIsRetried(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	connect := func(deadlockTimeout string) *pgx.Conn {
		t.Helper()
		c, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close(ctx) })
		if _, err := c.Exec(ctx, `SET deadlock_timeout = '`+deadlockTimeout+`'`); err != nil {
			t.Fatal(err)
		}
		return c
	}
	// A deadlock is looked for once, deadlock_timeout after a session
	// starts waiting: the migration's check must come after the other
	// session has started waiting too (within the second), the other's long
	// after.
	migrating, other, admin := connect("1s"), connect("30s"), connect("1s")
	if _, err := admin.Exec(ctx, `CREATE TABLE deadlock_a (); CREATE TABLE deadlock_b ()`); err != nil {
		t.Fatal(err)
	}
	var deadlocksBefore int64
	if err := admin.QueryRow(ctx, `SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()`).Scan(&deadlocksBefore); err != nil {
		t.Fatal(err)
	}

	tx, err := other.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `LOCK deadlock_b IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	m := schema.Migration{Version: 1000, Name: "deadlock_test",
		SQL: `LOCK deadlock_a IN ACCESS EXCLUSIVE MODE; LOCK deadlock_b IN ACCESS EXCLUSIVE MODE; ALTER TABLE deadlock_a ADD COLUMN applied boolean`}
	applied := make(chan error, 1)
	go func() { applied <- schema.Apply(ctx, migrating, m) }()
	pid := migrating.PgConn().PID()
	testwait.Eventually(t, 10*time.Second, "the migration holding deadlock_a and waiting for deadlock_b", func() (bool, string) {
		var wait string
		err := admin.QueryRow(ctx, `SELECT coalesce(wait_event_type, '') FROM pg_stat_activity WHERE pid = $1`, pid).Scan(&wait)
		return err == nil && wait == "Lock", fmt.Sprintf("wait event %q (%v)", wait, err)
	})
	// The other session now waits for the migration's deadlock_a: a
	// deadlock. It gets the lock only once the migration is rolled back.
	if _, err := tx.Exec(ctx, `LOCK deadlock_a IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatalf("the other session, which PostgreSQL should have let through: %v", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-applied:
		if err != nil {
			t.Fatalf("migration after being a deadlock's victim: %v, want applied on a retry", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("migration not applied within 10s of the deadlock")
	}
	var recorded, column bool
	var deadlocks int64
	if err := admin.QueryRow(ctx, `SELECT EXISTS (SELECT FROM webhook_ingress.schema_migrations WHERE version = 1000),
		EXISTS (SELECT FROM pg_attribute WHERE attrelid = 'deadlock_a'::regclass AND attname = 'applied'),
		(SELECT deadlocks FROM pg_stat_database WHERE datname = current_database())`).Scan(&recorded, &column, &deadlocks); err != nil {
		t.Fatal(err)
	}
	if !recorded || !column {
		t.Errorf("after the retry: recorded %t, its column added %t; want both", recorded, column)
	}
	// pg_stat_database is updated by the statistics system shortly after.
	testwait.Eventually(t, 10*time.Second, "the deadlock counted in pg_stat_database", func() (bool, string) {
		if _, err := admin.Exec(ctx, `SELECT pg_stat_clear_snapshot()`); err != nil {
			return false, err.Error()
		}
		err := admin.QueryRow(ctx, `SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()`).Scan(&deadlocks)
		return err == nil && deadlocks > deadlocksBefore, fmt.Sprintf("deadlocks %d, before %d (%v)", deadlocks, deadlocksBefore, err)
	})

	// Any other error is not retried: it is the migration's own.
	err = schema.Apply(ctx, migrating, schema.Migration{Version: 1001, Name: "broken_test", SQL: `ALTER TABLE no_such_table ADD COLUMN x int`})
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "42P01" {
		t.Fatalf("a broken migration: %v, want its own error (42P01)", err)
	}
}
