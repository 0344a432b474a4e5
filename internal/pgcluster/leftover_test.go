package pgcluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// TestStopLeftoverSparesAReusedPid: a stale postmaster.pid naming a live
// process that is not a server in this directory is left alone.
//
// Regression test (review helper-117; fixed by the /proc/PID/cwd check: the
// text describes the behaviour before the fix). StopLeftover (internal/pgcluster/cluster.go:310-322) decides that
// the pid in a postmaster.pid is "a server still running on this cluster's
// data directory" when that pid is alive and the file's second line names
// the data directory. But the second line is what the DEAD server wrote: a
// stale postmaster.pid (the server SIGKILLed with its process group, the OOM
// killer, a reboot — exactly the "killed" cases inlet dev recovers from)
// always names this directory. The check labelled "that pid is another
// process now" therefore never detects a reused pid, and StopLeftover sends
// SIGINT, SIGQUIT and SIGKILL to whatever process now has that pid — any
// process of the user, or, with inlet dev run as root (it then runs
// PostgreSQL as the postgres user), any process on the machine, e.g. the
// system's own PostgreSQL after a reboot.
//
// Here: a stale postmaster.pid naming this data directory whose pid is a
// live `sleep` (not a PostgreSQL at all). Expected: StopLeftover returns 0
// and leaves it alone. Actual: it kills it (and reports it as the leftover
// server it stopped).
func TestStopLeftoverSparesAReusedPid(t *testing.T) {
	dir := t.TempDir()
	c := &Cluster{cfg: Config{Dir: dir}}
	if err := os.MkdirAll(c.dataDir(), 0o700); err != nil {
		t.Fatal(err)
	}
	other := exec.Command("sleep", "300") // a process that reused the dead server's pid
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- other.Wait() }()
	t.Cleanup(func() { _ = other.Process.Kill() })

	// The file as a postmaster writes it (pid, data directory, start time,
	// port, socket directory, listen address, shmem key, status), left
	// behind by a server that was killed.
	pidFile := fmt.Sprintf("%d\n%s\n%d\n5432\n%s\n127.0.0.1\n  5432001         0\nready   \n",
		other.Process.Pid, c.dataDir(), time.Now().Add(-time.Hour).Unix(), filepath.Join(dir, "run"))
	if err := os.WriteFile(filepath.Join(c.dataDir(), "postmaster.pid"), []byte(pidFile), 0o600); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	pid, err := c.StopLeftover(ctx)
	select {
	case werr := <-exited:
		t.Fatalf("StopLeftover (returned pid %d, %v) killed pid %d, a `sleep` that only reused the pid of a dead server's stale postmaster.pid (%v); it must stop only a PostgreSQL running on %s",
			pid, err, other.Process.Pid, werr, c.dataDir())
	case <-time.After(200 * time.Millisecond):
	}
	if pid != 0 {
		t.Fatalf("StopLeftover = %d, %v: it named an unrelated process (a sleep) as the PostgreSQL it stopped", pid, err)
	}
}
