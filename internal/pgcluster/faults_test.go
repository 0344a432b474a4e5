package pgcluster_test

import (
	"context"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/internal/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// Freeze stops the sessions already open, not only the postmaster; Kill
// leaves no server process behind, so Start right after works. (Each
// backend is a session leader of its own: signalling the postmaster's
// process group reached neither.)
func TestFaultsReachEveryServerProcess(t *testing.T) {
	c := pgtest.Cluster(t)
	if c == nil {
		t.Skip("INLET_TEST_DATABASE_URL: not our cluster to freeze and kill")
	}
	ctx := context.Background()
	connect := func() *pgx.Conn {
		t.Helper()
		conn, err := pgx.Connect(ctx, c.URL("postgres"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close(context.Background()) })
		return conn
	}
	open := connect()
	if err := c.Freeze(); err != nil {
		t.Fatal(err)
	}
	qctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	_, err := open.Exec(qctx, "SELECT 1")
	cancel()
	if thawErr := c.Thaw(); thawErr != nil {
		t.Fatal(thawErr)
	}
	if err == nil {
		t.Fatal("an open session answered while the server was frozen")
	}
	busy := connect()
	var pid int
	if err := busy.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	if err := c.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, 0); err != syscall.ESRCH {
		t.Fatalf("backend %d still there after Kill returned (signal 0: %v)", pid, err)
	}
	if err := c.Start(ctx); err != nil {
		t.Fatalf("Start right after Kill: %v", err)
	}
	var one int
	if err := connect().QueryRow(ctx, "SELECT 1").Scan(&one); err != nil || one != 1 {
		t.Fatalf("after the restart: %d, %v", one, err)
	}
}
