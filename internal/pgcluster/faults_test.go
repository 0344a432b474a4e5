package pgcluster

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

func testCluster(t *testing.T) *Cluster {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a PostgreSQL server")
	}
	dir, err := os.MkdirTemp("", "inlet-pgcluster-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil { // the server user enters it
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	c, err := New(context.Background(), Config{Dir: dir, Install: true, Settings: map[string]string{"fsync": "off"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop() })
	return c
}

func backendPID(t *testing.T, conn *pgx.Conn) int {
	t.Helper()
	var pid int
	if err := conn.QueryRow(context.Background(), `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	return pid
}

// Kill takes every server process down with the postmaster, backends
// included (they run in process groups of their own), so the server starts
// again at once: a backend left behind would keep the shared memory and fail
// the start with "pre-existing shared memory block is still in use".
func TestKillTakesBackendsDown(t *testing.T) {
	c := testCluster(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, c.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	pid := backendPID(t, conn)
	if err := c.Kill(); err != nil {
		t.Fatal(err)
	}
	if alive(pid) {
		t.Fatalf("backend %d still runs after Kill", pid)
	}
	if err := c.Start(ctx); err != nil {
		t.Fatalf("Start right after Kill: %v", err)
	}
}

// Freeze stops the backends too: a query on an open connection gets no
// answer until Thaw.
func TestFreezeStopsBackends(t *testing.T) {
	c := testCluster(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, c.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	backendPID(t, conn)
	if err := c.Freeze(); err != nil {
		t.Fatal(err)
	}
	answered := make(chan error, 1)
	go func() {
		_, err := conn.Exec(ctx, `SELECT 1`)
		answered <- err
	}()
	select {
	case err := <-answered:
		_ = c.Thaw()
		t.Fatalf("a frozen server answered (err %v)", err)
	case <-time.After(500 * time.Millisecond): // proving silence takes a window
	}
	if err := c.Thaw(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-answered:
		if err != nil {
			t.Fatalf("query after Thaw: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no answer 30s after Thaw")
	}
}
