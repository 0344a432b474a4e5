package schema_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/internal/pgcluster"
	"github.com/inlet-dev/inlet/internal/pgtest"
	"github.com/inlet-dev/inlet/schema"
)

func reviewPrivateCluster(t *testing.T) (*pgcluster.Cluster, *pgx.Conn) {
	t.Helper()
	ctx := context.Background()
	cluster, err := pgcluster.New(ctx, pgcluster.Config{Dir: filepath.Join(pgtest.TempDir(t), "pg"), Install: true, Settings: map[string]string{"fsync": "off"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := cluster.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cluster.Stop() })
	admin, err := pgx.Connect(ctx, cluster.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close(context.Background()) })
	return cluster, admin
}

func reviewConnectAs(t *testing.T, url, user string) *pgx.Conn {
	t.Helper()
	ctx := context.Background()
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.User = user
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// reviewOwnerSetup makes, on a cluster of its own (roles are cluster-wide),
// a login role inlet_owner that may create roles (deployments/README.md,
// "Roles") and a database inlet that inlet_owner does not own.
func reviewOwnerSetup(t *testing.T) (*pgcluster.Cluster, *pgx.Conn) {
	t.Helper()
	cluster, admin := reviewPrivateCluster(t)
	for _, s := range []string{`CREATE ROLE inlet_owner LOGIN CREATEROLE`, `CREATE DATABASE inlet`} {
		if _, err := admin.Exec(context.Background(), s); err != nil {
			t.Fatal(err)
		}
	}
	return cluster, admin
}

// Found by review helper-75: an `inlet migrate` that has nothing to apply
// still needs the CREATE privilege on the database. schema.migrateTo runs
// `CREATE SCHEMA IF NOT EXISTS webhook_ingress` before it reads the applied
// version, and PostgreSQL checks CREATE on the database before it looks
// whether the schema exists. So once a DBA takes CREATE on the database back
// from the schema owner after the first install (least privilege: the owner
// needs CREATE on its schema only, which it has as the owner), every
// `inlet migrate` fails with "create schema_migrations: permission denied
// for database inlet" although the schema is current and the help says
// "Running it again is a no-op". With the shipped systemd units every service
// `Requires=inlet-migrate.service`, so ingress, streamer and consumer no
// longer start at all; on Kubernetes the migrate Job fails on every rollout.
// The error also names the wrong thing (schema_migrations exists).
//
// Expected: a migrate with nothing to apply succeeds for the schema's owner
// without CREATE on the database (the owner can still do its real work here:
// the test shows create_partitions works).
func TestMigrateNoOpNeedsNoCreateOnDatabase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cluster, admin := reviewOwnerSetup(t)
	if _, err := admin.Exec(ctx, `GRANT CREATE ON DATABASE inlet TO inlet_owner`); err != nil {
		t.Fatal(err)
	}
	owner := reviewConnectAs(t, cluster.URL("inlet"), "inlet_owner")
	if _, err := schema.Migrate(ctx, owner); err != nil {
		t.Fatalf("first migrate, with CREATE on the database: %v", err)
	}
	if _, err := admin.Exec(ctx, `REVOKE CREATE ON DATABASE inlet FROM inlet_owner`); err != nil {
		t.Fatal(err)
	}
	// The owner's own work needs nothing of the database: it owns the schema.
	if _, err := owner.Exec(ctx, `SELECT count(*) FROM webhook_ingress.create_partitions('day', 10)`); err != nil {
		t.Fatalf("create partitions as the owner without CREATE on the database: %v", err)
	}
	applied, err := schema.Migrate(ctx, owner)
	if err != nil {
		t.Fatalf("inlet migrate with nothing to apply, as the schema's owner without CREATE on the database: %v; want a no-op", err)
	}
	if len(applied) != 0 {
		t.Fatalf("applied %d migrations on a current schema, want none", len(applied))
	}
}

// Found by review helper-75: a schema a DBA made for Inlet and gave to its
// owner (`CREATE SCHEMA webhook_ingress AUTHORIZATION inlet_owner`, the usual
// way to let an application own its schema and nothing else of the
// database) cannot be migrated by that owner: migrate.go's
// `CREATE SCHEMA IF NOT EXISTS webhook_ingress` and the same statement in
// 001_initial need CREATE on the database even though the schema is there.
// Nothing else in the 46 migrations needs it (checked: with those two
// statements skipped every migration applies as this owner).
//
// Expected: `inlet migrate` as the owner of an existing, empty
// webhook_ingress applies every migration.
func TestMigrateIntoSchemaMadeByDBA(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cluster, _ := reviewOwnerSetup(t)
	su := reviewConnectAs(t, cluster.URL("inlet"), "postgres")
	if _, err := su.Exec(ctx, `CREATE SCHEMA webhook_ingress AUTHORIZATION inlet_owner`); err != nil {
		t.Fatal(err)
	}
	owner := reviewConnectAs(t, cluster.URL("inlet"), "inlet_owner")
	if _, err := schema.Migrate(ctx, owner); err != nil {
		t.Fatalf("inlet migrate as the owner of an existing, empty webhook_ingress: %v; want every migration applied", err)
	}
	if err := schema.Check(ctx, owner); err != nil {
		t.Fatal(err)
	}
}
