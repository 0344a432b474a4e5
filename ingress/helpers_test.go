package ingress_test

import (
	"context"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/schema"
)

func migrateAll(ctx context.Context, url string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = schema.Migrate(ctx, conn)
	return err
}

// tempDir is a directory the postgres server user can enter (t.TempDir's
// parents are private to the test's user).
func tempDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "inlet-ingress-test-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(d, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}
