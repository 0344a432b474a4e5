package schema_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/schema"
)

// 079 runs twice (a rewound schema_migrations runs it again), on a
// reconcile_runs with rows, and leaves the one index.
func TestMigration079RunsTwice(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, conn := migratedTo(t, 78)
	if _, err := conn.Exec(ctx, `INSERT INTO webhook_ingress.reconcile_runs (source, api, window_since, window_until, dry_run, scope)
		SELECT 'stripe', 'stripe-events-api', now() - interval '1 hour', now(), g % 5 = 0, CASE WHEN g % 3 = 0 THEN NULL ELSE 'account=a' || (g % 3) END
		FROM generate_series(1, 100) g`); err != nil {
		t.Fatal(err)
	}
	ms, err := schema.Migrations()
	if err != nil {
		t.Fatal(err)
	}
	m := ms[78]
	if m.Version != 79 {
		t.Fatalf("migration 79 is %03d_%s", m.Version, m.Name)
	}
	for run := 1; run <= 2; run++ {
		if err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, m.SQL)
			return err
		}); err != nil {
			t.Fatalf("%03d_%s run %d: %v", m.Version, m.Name, run, err)
		}
	}
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_catalog.pg_indexes
		WHERE schemaname = 'webhook_ingress' AND tablename = 'reconcile_runs' AND indexname = 'idx_reconcile_runs_scope_newest'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Fatalf("%d indexes idx_reconcile_runs_scope_newest after running %03d_%s twice, want 1", n, m.Version, m.Name)
	}
}
