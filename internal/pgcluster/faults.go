package pgcluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// StopImmediate stops the server as `pg_ctl stop -m immediate` does
// (SIGQUIT): no checkpoint, sessions cut, crash recovery at the next Start.
func (c *Cluster) StopImmediate() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stopLocked(syscall.SIGQUIT, 60*time.Second)
}

// Freeze stops every process of the server (SIGSTOP to the postmaster and
// each of its children): connections stay open and nothing answers, as on a
// stalled disk or a paused VM. Thaw resumes it.
func (c *Cluster) Freeze() error { return c.signalAll(syscall.SIGSTOP) }

// Thaw resumes a frozen server.
func (c *Cluster) Thaw() error { return c.signalAll(syscall.SIGCONT) }

// signalAll signals the postmaster and its children. Not its process group:
// each child makes itself a session leader, so the group holds only the
// postmaster (a frozen group left every open session answering).
func (c *Cluster) signalAll(sig syscall.Signal) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cmd == nil {
		return errors.New("pgcluster: not running")
	}
	pid := c.cmd.Process.Pid
	if sig == syscall.SIGSTOP {
		// The postmaster first, so it forks nothing new meanwhile.
		if err := syscall.Kill(pid, sig); err != nil {
			return fmt.Errorf("signal %s to the postmaster: %w", sig, err)
		}
	}
	for _, child := range childrenOf(pid) {
		_ = syscall.Kill(child, sig) // it may have just exited
	}
	if sig != syscall.SIGSTOP {
		if err := syscall.Kill(pid, sig); err != nil {
			return fmt.Errorf("signal %s to the postmaster: %w", sig, err)
		}
	}
	return nil
}

// NewStandby makes a streaming standby of c in dir (pg_basebackup of the
// running server, with its primary_conninfo written) and returns it, not
// started. Start it with the same Settings as the primary; Promote makes it
// a primary.
func (c *Cluster) NewStandby(ctx context.Context, dir string, settings map[string]string) (*Cluster, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	s := &Cluster{cfg: Config{Dir: dir, Settings: settings, Logger: c.cfg.Logger}, binDir: c.binDir,
		uid: c.uid, gid: c.gid, asUser: c.asUser}
	for _, d := range []string{dir, s.socketDir()} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("create standby directory %s: %w", d, err)
		}
		if err := s.chown(d); err != nil {
			return nil, fmt.Errorf("give standby directory %s to the postgres user: %w", d, err)
		}
	}
	// pg_basebackup is a client tool: a server-only directory (the
	// machine's postgres and initdb on PATH) may lack it.
	tool := filepath.Join(c.binDir, "pg_basebackup")
	if _, err := os.Stat(tool); err != nil {
		if tool, err = exec.LookPath("pg_basebackup"); err != nil {
			return nil, fmt.Errorf("pg_basebackup is neither in %s nor on PATH: %w", c.binDir, err)
		}
	}
	cmd := s.command(ctx, tool, "--pgdata", s.dataDir(), "--host", "127.0.0.1",
		"--port", strconv.Itoa(c.Port()), "--username", "postgres", "--wal-method", "stream",
		"--write-recovery-conf", "--checkpoint", "fast", "--no-sync")
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("pg_basebackup of the server on port %d into %s: %w\n%s", c.Port(), s.dataDir(), err, out)
	}
	return s, nil
}

// Promote ends recovery on a standby (pg_promote) and waits until it
// accepts writes.
func (c *Cluster) Promote(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, c.URL("postgres"))
	if err != nil {
		return fmt.Errorf("connect to the standby to promote it: %w", err)
	}
	defer conn.Close(ctx)
	var ok bool
	if err := conn.QueryRow(ctx, `SELECT pg_promote(true, 60)`).Scan(&ok); err != nil {
		return fmt.Errorf("promote the standby on port %d: %w", c.Port(), err)
	}
	if !ok {
		return fmt.Errorf("the standby on port %d was not promoted within 60s", c.Port())
	}
	return nil
}
