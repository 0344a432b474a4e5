package pgcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/internal/freeport"
)

// Config describes a local cluster.
type Config struct {
	// Dir holds the cluster: data/ (PGDATA), run/ (socket), postgres.log.
	// Required.
	Dir string
	// Port is the TCP port on 127.0.0.1. Defaults to a free port, chosen at
	// the first Start (PreferPort when that is free) and kept by the
	// following ones.
	Port int
	// PreferPort, with Port 0, is the port the first Start takes when it is
	// free on 127.0.0.1 (a port the caller remembers from an earlier process,
	// so that URLs given out then still work); when it is taken, Start picks
	// another free port, and Port tells which.
	PreferPort int
	// AvoidPorts, with Port 0, are ports Start never picks: those the
	// caller is about to listen on itself (free now, taken a moment later).
	AvoidPorts []int
	// Settings are extra `-c name=value` server settings.
	Settings map[string]string
	// Install allows installing PostgreSQL with apt-get when absent (root only).
	Install bool
	// Env is added to the server's environment (tests: LD_PRELOAD of
	// libfaketime to put its clock off).
	Env []string
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// Cluster is a PostgreSQL server running from the machine's binaries, as a
// child process of this one.
type Cluster struct {
	cfg    Config
	binDir string
	uid    int
	gid    int
	asUser bool
	// made: New ran initdb, so a failed Start is not the data's fault.
	made bool

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	port int
}

// New finds the binaries and prepares (initdb) the cluster directory if it is
// new. It does not start the server.
func New(ctx context.Context, cfg Config) (*Cluster, error) {
	if cfg.Dir == "" {
		return nil, errors.New("pgcluster: Dir is required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	dir, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return nil, err
	}
	cfg.Dir = dir
	bin, err := FindBinaries(ctx, FindOptions{Install: cfg.Install, Logger: cfg.Logger})
	if err != nil {
		return nil, err
	}
	c := &Cluster{cfg: cfg, binDir: bin}
	if os.Geteuid() == 0 {
		uid, gid, err := serverUser(ctx)
		if err != nil {
			return nil, err
		}
		c.uid, c.gid, c.asUser = uid, gid, true
	}
	if err := c.initdb(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

// BinDir is where the server binaries were found.
func (c *Cluster) BinDir() string { return c.binDir }

func (c *Cluster) dataDir() string   { return filepath.Join(c.cfg.Dir, "data") }
func (c *Cluster) socketDir() string { return filepath.Join(c.cfg.Dir, "run") }
func (c *Cluster) logPath() string   { return filepath.Join(c.cfg.Dir, "postgres.log") }

// serverUser returns the account to run the server as when we are root: the
// postgres user, created when missing.
func serverUser(ctx context.Context) (int, int, error) {
	u, err := user.Lookup("postgres")
	if err != nil {
		out, err := exec.CommandContext(ctx, "useradd", "--system", "--user-group", "--no-create-home",
			"--home-dir", "/nonexistent", "--shell", "/usr/sbin/nologin", "postgres").CombinedOutput()
		if err != nil {
			return 0, 0, fmt.Errorf("PostgreSQL refuses to run as root and there is no postgres user; creating one failed: %v: %s", err, out)
		}
		if u, err = user.Lookup("postgres"); err != nil {
			return 0, 0, fmt.Errorf("look up postgres user after creating it: %w", err)
		}
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return uid, gid, nil
}

func (c *Cluster) command(ctx context.Context, name string, args ...string) *exec.Cmd {
	if !filepath.IsAbs(name) {
		name = filepath.Join(c.binDir, name)
	}
	cmd := exec.CommandContext(ctx, name, args...) //nolint:gosec // G204: the PostgreSQL binaries FindBinaries found, with our own arguments
	cmd.Dir = c.cfg.Dir
	cmd.Env = append(append(os.Environ(), "LC_ALL=C", "TZ=UTC"), c.cfg.Env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if c.asUser {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uint32(c.uid), Gid: uint32(c.gid)} //nolint:gosec // G115: the postgres user's uid and gid from os/user fit uint32
	}
	return cmd
}

func (c *Cluster) chown(path string) error {
	if !c.asUser {
		return nil
	}
	return os.Chown(path, c.uid, c.gid)
}

func (c *Cluster) initdb(ctx context.Context) error {
	if err := os.MkdirAll(filepath.Dir(c.cfg.Dir), 0o755); err != nil { //nolint:gosec // G301: the postgres user (when run as root) must enter every directory above the cluster; the cluster's own are 0700
		return fmt.Errorf("create %s: %w", filepath.Dir(c.cfg.Dir), err)
	}
	if c.asUser && !reachable(filepath.Dir(c.cfg.Dir), c.uid, c.gid) {
		return fmt.Errorf("%w: %s (the postgres user must be able to enter every directory above it)", ErrUnreachableDir, c.cfg.Dir)
	}
	for _, d := range []string{c.cfg.Dir, c.socketDir()} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return fmt.Errorf("create cluster directory %s: %w", d, err)
		}
		if err := c.chown(d); err != nil {
			return fmt.Errorf("give cluster directory %s to the postgres user: %w", d, err)
		}
	}
	if _, err := os.Stat(filepath.Join(c.dataDir(), "PG_VERSION")); err == nil {
		return nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("look for the cluster in %s: %w", c.dataDir(), err)
	}
	// No cluster, or what an initdb of an earlier version killed early
	// left (it ran in data/ itself).
	if err := os.RemoveAll(c.dataDir()); err != nil {
		return fmt.Errorf("remove %s, an unfinished cluster: %w", c.dataDir(), err)
	}
	// initdb writes PG_VERSION and pg_control long before its bootstrap
	// ends, so nothing inside a data directory tells a finished one from one
	// whose initdb was killed (an interrupt of the first inlet dev cancels
	// ctx): initdb makes it under another name, and only a finished one is
	// renamed to data/, in one step on one filesystem. What an interrupted
	// initdb left is removed here, before the next one.
	partial := c.dataDir() + ".partial"
	if err := os.RemoveAll(partial); err != nil {
		return fmt.Errorf("remove the unfinished cluster %s of an interrupted initdb: %w", partial, err)
	}
	cmd := c.command(ctx, "initdb", "--pgdata", partial, "--username", "postgres",
		"--auth", "trust", "--encoding", "UTF8", "--locale", "C", "--no-sync")
	// The whole process group: initdb's bootstrap postgres, left running,
	// would write on into the directory being removed.
	cmd.Cancel = func() error {
		if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); !errors.Is(err, syscall.ESRCH) {
			return err
		}
		return os.ErrProcessDone
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		_ = os.RemoveAll(partial)
		return fmt.Errorf("initdb %s: %w\n%s", partial, err, out)
	}
	// The directory stays the postgres user's (when run as root): rename
	// keeps the owner, and the directory above is this process's to write.
	if err := os.Rename(partial, c.dataDir()); err != nil {
		return fmt.Errorf("move the new cluster %s to %s: %w", partial, c.dataDir(), err)
	}
	c.made = true
	return nil
}

// ErrExistingDidNotStart means Start failed on a cluster made by an earlier
// New, not by this one: its data may be the cause, and deleting Dir makes
// the next New start over with an empty cluster.
var ErrExistingDidNotStart = errors.New("postgres did not start on the existing cluster")

// ErrUnreachableDir means the server's user cannot reach the cluster directory.
var ErrUnreachableDir = errors.New("the PostgreSQL server user cannot reach the cluster directory")

// reachable reports whether uid/gid may search every directory from / to dir.
func reachable(dir string, uid, gid int) bool {
	for d := dir; ; d = filepath.Dir(d) {
		st, err := os.Stat(d)
		if err != nil {
			return false
		}
		sys, ok := st.Sys().(*syscall.Stat_t)
		if !ok {
			return true
		}
		mode := st.Mode().Perm()
		switch {
		case int(sys.Uid) == uid:
			if mode&0o100 == 0 {
				return false
			}
		case int(sys.Gid) == gid:
			if mode&0o010 == 0 {
				return false
			}
		default:
			if mode&0o001 == 0 {
				return false
			}
		}
		if d == filepath.Dir(d) {
			return true
		}
	}
}

// Start launches the server and waits until it accepts connections.
func (c *Cluster) Start(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cmd != nil {
		return errors.New("pgcluster: already started")
	}
	port := c.cfg.Port
	if port == 0 {
		switch {
		case c.port != 0:
			port = c.port // keep the port across restarts, so clients reconnect
		default:
			p, err := pickPort(c.cfg.PreferPort, c.cfg.AvoidPorts, portFree, freeport.Pick)
			if err != nil {
				return err
			}
			port = p
		}
	}
	args := []string{"-D", c.dataDir(), "-p", strconv.Itoa(port), "-k", c.socketDir(),
		"-c", "listen_addresses=127.0.0.1", "-c", "logging_collector=off"}
	for k, v := range c.cfg.Settings {
		args = append(args, "-c", k+"="+v)
	}
	logf, err := os.OpenFile(c.logPath(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("open server log: %w", err)
	}
	// The child gets its own context: the server must outlive the caller's ctx.
	cmd := c.command(context.Background(), "postgres", args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start postgres: %w", err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		logf.Close()
		close(done)
	}()
	c.cmd, c.done, c.port = cmd, done, port
	if err := c.waitReady(ctx, done); err != nil {
		_ = c.stopLocked(syscall.SIGQUIT, 10*time.Second)
		if !c.made && ctx.Err() == nil {
			// Its data may be what fails (a cluster damaged by a disk
			// full, or half made by an initdb killed before initdb ran
			// under another name): the caller can say how to start over.
			return fmt.Errorf("%w: its data is in %s (log %s): %w\n%s", ErrExistingDidNotStart, c.dataDir(), c.logPath(), err, c.logTail())
		}
		return fmt.Errorf("postgres did not start (log %s): %w\n%s", c.logPath(), err, c.logTail())
	}
	return nil
}

func (c *Cluster) waitReady(ctx context.Context, done <-chan struct{}) error {
	deadline := time.Now().Add(60 * time.Second)
	for {
		conn, err := pgx.Connect(ctx, urlFor(c.port, "postgres"))
		if err == nil {
			conn.Close(ctx)
			return nil
		}
		select {
		case <-done:
			return errors.New("server exited")
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not accepting connections after 60s: %w", err)
		}
	}
}

// logTail is what the server's log says of its failure: the FATAL, PANIC,
// ERROR and HINT lines of its last 3,000 bytes, else its last 5 lines.
func (c *Cluster) logTail() string {
	b, _ := os.ReadFile(c.logPath())
	if len(b) > 3000 {
		b = b[len(b)-3000:]
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	var said []string
	for _, l := range lines {
		for _, level := range []string{"FATAL:", "PANIC:", "ERROR:", "HINT:"} {
			if strings.Contains(l, level) {
				said = append(said, strings.TrimSpace(l))
				break
			}
		}
	}
	if len(said) == 0 {
		said = lines[max(len(lines)-5, 0):]
	}
	return strings.Join(said, "\n")
}

// sameDir reports whether a and b name one directory.
func sameDir(a, b string) bool {
	ia, err := os.Stat(a)
	if err != nil {
		return false
	}
	ib, err := os.Stat(b)
	return err == nil && os.SameFile(ia, ib)
}

// StopLeftover stops a server still running on this cluster's data
// directory that this process did not start (its postmaster.pid names a live
// postgres): one left behind by a process killed without stopping it (its
// server runs in a process group of its own). Call it only holding the
// directory for yourself (inlet dev's lock), before Start. It returns the
// server's pid, 0 when there was none.
func (c *Cluster) StopLeftover(ctx context.Context) (int, error) {
	b, err := os.ReadFile(filepath.Join(c.dataDir(), "postmaster.pid"))
	if err != nil {
		return 0, nil // none: never started, or stopped cleanly
	}
	lines := strings.SplitN(string(b), "\n", 3)
	pid, err := strconv.Atoi(strings.TrimSpace(lines[0]))
	if err != nil || pid <= 0 || !alive(pid) {
		return 0, nil // stale file: the server died; postgres removes it at start
	}
	if len(lines) < 2 || filepath.Clean(strings.TrimSpace(lines[1])) != filepath.Clean(c.dataDir()) {
		return 0, nil // not this directory's
	}
	// The file is the dead server's own: its pid may be another process's
	// now. A postmaster runs in its data directory; anything else is spared.
	if cwd, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/cwd"); err != nil || !sameDir(cwd, c.dataDir()) {
		return 0, nil
	}
	// Fast shutdown, as Stop; after 30 s an immediate one (crash recovery
	// at the next start), after 10 s more SIGKILL.
	for _, step := range []struct {
		sig  syscall.Signal
		wait time.Duration
	}{{syscall.SIGINT, 30 * time.Second}, {syscall.SIGQUIT, 10 * time.Second}, {syscall.SIGKILL, 10 * time.Second}} {
		if err := syscall.Kill(pid, step.sig); err != nil {
			if errors.Is(err, syscall.ESRCH) {
				return pid, nil
			}
			return pid, fmt.Errorf("stop the PostgreSQL left running on %s (pid %d): %w", c.dataDir(), pid, err)
		}
		deadline := time.Now().Add(step.wait)
		for time.Now().Before(deadline) {
			if !alive(pid) {
				return pid, nil
			}
			select {
			case <-ctx.Done():
				return pid, ctx.Err()
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	return pid, fmt.Errorf("the PostgreSQL left running on %s (pid %d) does not stop", c.dataDir(), pid)
}

// Stop shuts the server down (fast shutdown: sessions are disconnected, then a
// clean checkpoint) and waits for it to exit.
func (c *Cluster) Stop() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stopLocked(syscall.SIGINT, 60*time.Second)
}

// Kill stops the server with SIGKILL, as a crash would.
func (c *Cluster) Kill() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stopLocked(syscall.SIGKILL, 60*time.Second)
}

func (c *Cluster) stopLocked(sig syscall.Signal, wait time.Duration) error {
	if c.cmd == nil {
		return nil
	}
	cmd, done := c.cmd, c.done
	c.cmd, c.done = nil, nil
	if sig != syscall.SIGKILL {
		_ = cmd.Process.Signal(sig)
		select {
		case <-done:
			return nil
		case <-time.After(wait):
		}
	}
	// Every server process, as a crash of the machine would: each backend
	// runs in a process group of its own (PostgreSQL's children call
	// setsid), so signalling the postmaster's group misses them, and a
	// backend left behind keeps the shared memory attached: the next Start
	// then fails with "pre-existing shared memory block is still in use".
	children := childPIDs(cmd.Process.Pid)
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	for _, pid := range children {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	<-done
	deadline := time.Now().Add(wait)
	for _, pid := range children {
		for alive(pid) {
			if time.Now().After(deadline) {
				return fmt.Errorf("postgres process %d still running %s after SIGKILL", pid, wait)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	if sig != syscall.SIGKILL {
		return fmt.Errorf("postgres did not stop within %s; killed", wait)
	}
	return nil
}

// childPIDs lists the processes whose parent is pid, from /proc.
func childPIDs(pid int) []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, ok := procStat(n); ok && st.ppid == pid {
			out = append(out, n)
		}
	}
	return out
}

// alive reports whether pid still runs (a zombie, waiting for its new parent
// to reap it, holds no shared memory and counts as gone).
func alive(pid int) bool {
	st, ok := procStat(pid)
	return ok && st.state != 'Z' && st.state != 'X'
}

type stat struct {
	state byte
	ppid  int
}

// procStat reads the state and parent of pid from /proc/<pid>/stat; the
// command name in parentheses may itself contain spaces and parentheses.
func procStat(pid int) (stat, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return stat{}, false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return stat{}, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 || len(f[0]) != 1 {
		return stat{}, false
	}
	ppid, err := strconv.Atoi(f[1])
	if err != nil {
		return stat{}, false
	}
	return stat{state: f[0][0], ppid: ppid}, true
}

// Running reports whether the server process is up.
func (c *Cluster) Running() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cmd != nil
}

// Port is the TCP port of the running (or last running) server.
func (c *Cluster) Port() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.port
}

// URL is a superuser connection string for database db.
func (c *Cluster) URL(db string) string { return urlFor(c.Port(), db) }

func urlFor(port int, db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", port, db)
}

// portFree reports whether port can be bound on 127.0.0.1 (where the server
// listens) right now.
func portFree(port int) bool {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return false
	}
	_ = l.Close()
	return true
}

// pickPort is the port of a first Start: prefer when it is free and not
// one of avoid, else a free port that pick draws and that is not one of
// avoid.
func pickPort(prefer int, avoid []int, free func(int) bool, pick func() (int, error)) (int, error) {
	if prefer > 0 && !slices.Contains(avoid, prefer) && free(prefer) {
		return prefer, nil
	}
	for range 100 {
		p, err := pick()
		if err != nil {
			return 0, fmt.Errorf("find a free port: %w", err)
		}
		if !slices.Contains(avoid, p) {
			return p, nil
		}
	}
	return 0, fmt.Errorf("find a free port: every one found is among %v", avoid)
}
