package schema_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/internal/pgcluster"
	"github.com/inlet-dev/inlet/internal/pgtest"
	"github.com/inlet-dev/inlet/schema"
)

// Installations sharing one PostgreSQL cluster (one database each) may run
// inlet migrate at the same moment. The migration lock holds within one
// database only, and the roles the migrations create and grant are the
// cluster's: the first migration of each raced on them (a unique violation
// on pg_authid_rolname_index). Every one must succeed. On a cluster of its
// own, as the shared test cluster already has the roles.
func TestMigrateDatabasesOfOneClusterAtOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cluster, err := pgcluster.New(ctx, pgcluster.Config{Dir: filepath.Join(pgtest.TempDir(t), "pg"), Install: true, Settings: map[string]string{"fsync": "off"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := cluster.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cluster.Stop() }()
	admin, err := pgx.Connect(ctx, cluster.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	const n = 4
	for i := range n {
		if _, err := admin.Exec(ctx, fmt.Sprintf("CREATE DATABASE db%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	errs := make(chan error, n)
	gate := make(chan struct{})
	for i := range n {
		conn, err := pgx.Connect(ctx, cluster.URL(fmt.Sprintf("db%d", i)))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		go func() {
			<-gate
			_, err := schema.Migrate(ctx, conn)
			errs <- err
		}()
	}
	close(gate)
	for range n {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	for i := range n {
		conn, err := pgx.Connect(ctx, cluster.URL(fmt.Sprintf("db%d", i)))
		if err != nil {
			t.Fatal(err)
		}
		err = schema.Check(ctx, conn)
		conn.Close(ctx)
		if err != nil {
			t.Errorf("db%d after migrating: %v", i, err)
		}
	}
}
