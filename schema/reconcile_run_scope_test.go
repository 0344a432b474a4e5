package schema_test

import (
	"context"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/schema"
)

// Migration 071 (reconcile_runs.scope, review helper-241) on a database with
// runs recorded: those keep scope NULL (the whole source, as every run
// counted before), the migration runs twice safely, and the ingress role,
// which records a run when it starts, may write the new column.
func TestReconcileRunScopeMigration(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, conn := migratedTo(t, 70)
	execAll(t, conn,
		`INSERT INTO webhook_ingress.reconcile_runs (source, api, window_since, window_until, dry_run)
		 VALUES ('stripe', 'stripe-events-api', now() - interval '25 hours', now() - interval '1 hour', false)`)

	ms, err := schema.Migrations()
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(ms, func(m schema.Migration) bool { return m.Version == 71 })
	if i < 0 {
		t.Fatal("no migration 071")
	}
	if _, err := schema.MigrateTo(ctx, conn, 71); err != nil {
		t.Fatalf("migrate from 070: %v", err)
	}
	// A rewound schema_migrations (or a re-run by hand) runs it again.
	if err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, ms[i].SQL)
		return err
	}); err != nil {
		t.Fatalf("%03d_%s run a second time: %v", ms[i].Version, ms[i].Name, err)
	}

	var nulls int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM webhook_ingress.reconcile_runs WHERE scope IS NULL`).Scan(&nulls); err != nil || nulls != 1 {
		t.Fatalf("runs recorded before 071 with scope NULL: %d, %v; want 1", nulls, err)
	}
	var scope string
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SET LOCAL ROLE webhook_ingress_writer`); err != nil {
			return err
		}
		return tx.QueryRow(ctx, `INSERT INTO webhook_ingress.reconcile_runs (source, api, window_since, window_until, dry_run, scope)
			VALUES ('stripe', 'stripe-events-api', now() - interval '2 hours', now() - interval '1 hour', false, 'types=charge.*')
			RETURNING scope`).Scan(&scope)
	})
	if err != nil || scope != "types=charge.*" {
		t.Fatalf("the ingress role records a run's scope: %q, %v", scope, err)
	}
}
