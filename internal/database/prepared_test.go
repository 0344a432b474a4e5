package database_test

import (
	"context"
	"os"
	"testing"

	"github.com/inlet-dev/inlet/internal/database"
	"github.com/inlet-dev/inlet/internal/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// Every service's statements are prepared once per connection and reused
// (pgx's statement cache): the hot paths (claim, take, complete, insert) then
// skip parse and plan. A URL setting default_query_exec_mode (for a
// transaction pooler) would turn that off.
func TestPoolsPrepareTheirStatements(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, err := database.Open(ctx, pgtest.NewDatabase(t), database.Options{Role: "webhook_worker", MaxConns: 1, AppName: "prepared-test"})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	const q = `SELECT count(*) FROM webhook_ingress.jobs WHERE id = $1 /* prepared-test */`
	for i := range 3 {
		var n int
		if err := pool.QueryRow(ctx, q, int64(i)).Scan(&n); err != nil {
			t.Fatal(err)
		}
	}
	var prepared int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_prepared_statements WHERE statement = $1`, q).Scan(&prepared); err != nil {
		t.Fatal(err)
	}
	if prepared != 1 {
		t.Fatalf("the statement run 3 times is prepared %d times on the connection, want once", prepared)
	}
}
