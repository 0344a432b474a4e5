package tests

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/inlet-dev/inlet/internal/pgtest"
	"github.com/inlet-dev/inlet/internal/testwait"
)

// devEnv is the environment of an inlet dev on embedded defaults whose
// three listeners are free loopback ports.
func devEnv(t *testing.T) []string {
	t.Helper()
	return cleanEnv("INLET_LISTEN="+freeAddr(t), "INLET_METRICS_LISTEN="+freeAddr(t), "INLET_ADMIN_LISTEN="+freeAddr(t))
}

// devURL is the database URL inlet dev wrote under its data directory.
func devURL(t *testing.T, dataDir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dataDir, "database_url"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// postgresOf lists the PostgreSQL processes serving the cluster under
// dataDir (their command line names it).
func postgresOf(dataDir string) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil {
			continue
		}
		args := strings.Split(string(cmdline), "\x00")
		if len(args) > 0 && filepath.Base(args[0]) == "postgres" && strings.Contains(string(cmdline), dataDir) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// postmastersOf is postgresOf without the postmasters' children (a backend
// just forked still shows its parent's command line for a moment).
func postmastersOf(dataDir string) []int {
	pids := postgresOf(dataDir)
	var out []int
	for _, pid := range pids {
		stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			continue
		}
		f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		if len(f) < 2 {
			continue
		}
		if ppid, err := strconv.Atoi(f[1]); err == nil && !slices.Contains(pids, ppid) {
			out = append(out, pid)
		}
	}
	return out
}

// killOrphans stops the PostgreSQL processes of dataDir that outlived their
// inlet dev, so a failing test leaves none behind.
func killOrphans(dataDir string) {
	for _, pid := range postgresOf(dataDir) {
		_ = syscall.Kill(pid, syscall.SIGQUIT)
	}
}

// An inlet.yaml next to .inlet/ (for http-forward, relay secrets, ...) does
// not hide the database inlet dev started from the other commands: every
// command run from that directory uses it. They used to fail with "no
// database URL" (events, dlq, replay, subscriptions) or "no database"
// (migrate, retention, roles): only the embedded defaults read
// .inlet/database_url.
func TestEveryCommandUsesTheDevDatabase(t *testing.T) {
	t.Parallel()
	dir := pgtest.TempDir(t)
	addr := freeAddr(t)
	writeFile(t, dir, "inlet.yaml", fmt.Sprintf(`ingress:
  listen: %q
  metrics_listen: %q
sources:
  - name: stripe
    type: stripe
    secrets: ["whsec_test_every_command"]
consumer:
  handlers:
    - name: log
      type: log
log:
  format: text
`, addr, freeAddr(t)))
	env := cleanEnv()
	p := startIn(t, dir, inletBin, env, "dev", "--admin-listen", "off") // a file without admin: would take 127.0.0.1:8084
	p.waitOutput("Ctrl-C stops.", 3*time.Minute)
	if out, errOut, code := runInletIn(t, dir, env, "send", "stripe", "--url", "http://"+addr); code != 0 || !strings.Contains(out, `"stored"`) {
		t.Fatalf("send: exit %d\n%s%s", code, out, errOut)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"events", "list"}, "stripe"},
		{[]string{"dlq", "list"}, ""},
		{[]string{"subscriptions", "list"}, "log"},
		{[]string{"replay", "--handler", "log", "--source", "stripe", "--dry-run"}, ""},
		{[]string{"audit", "verify"}, ""},
		{[]string{"migrate"}, "is current"},
		{[]string{"retention", "--dry-run"}, ""},
		{[]string{"roles", "list"}, ""},
	} {
		out, errOut, code := runInletIn(t, dir, env, c.args...)
		if code != 0 || !strings.Contains(out, c.want) {
			t.Errorf("inlet %s next to inlet.yaml and .inlet/: exit %d, want 0 and %q\n%s%s", strings.Join(c.args, " "), code, c.want, out, errOut)
		}
	}
	if err := p.stop(); err != nil {
		t.Fatalf("inlet dev after SIGTERM: %v", err)
	}
}

// The local PostgreSQL of inlet dev listens on the same port at every start
// (its URL, exported or in a config file, keeps working after a restart);
// when another process has taken that port it says so and names the new URL.
// It used to pick a new random port at every start.
func TestDevPostgreSQLKeepsItsPort(t *testing.T) {
	t.Parallel()
	data := pgtest.TempDir(t)
	run := func() *proc {
		t.Helper()
		p := start(t, devEnv(t), "dev", "--data-dir", data)
		p.waitOutput("Ctrl-C stops.", 3*time.Minute)
		return p
	}
	stop := func(p *proc) {
		t.Helper()
		if err := p.stop(); err != nil {
			t.Fatalf("inlet dev after SIGTERM: %v\n%s", err, p.errOut())
		}
	}
	p := run()
	first := devURL(t, data)
	stop(p)
	p = run()
	if again := devURL(t, data); again != first {
		t.Fatalf("the restarted local PostgreSQL is at %s, was %s", again, first)
	}
	stop(p)

	u, err := url.Parse(first)
	if err != nil {
		t.Fatal(err)
	}
	taken, err := net.Listen("tcp", u.Host)
	if err != nil {
		t.Fatalf("take the port of %s: %v", first, err)
	}
	defer taken.Close()
	p = run()
	moved := devURL(t, data)
	if moved == first {
		t.Fatalf("database_url still %s, whose port another process holds", first)
	}
	if log := p.errOut(); !strings.Contains(log, "port "+u.Port()+" is taken by another process") || !strings.Contains(log, moved) {
		t.Fatalf("no warning naming port %s and the new URL %s:\n%s", u.Port(), moved, log)
	}
	stop(p)
}

// A listener of inlet dev that is in use fails at once, in one line naming
// its setting and how to move it, before any PostgreSQL or service starts
// (it used to start everything, print warnings of the services cut short,
// and name the cause last). Every listener has a flag.
func TestDevListenerInUseFailsBeforeAnythingStarts(t *testing.T) {
	t.Parallel()
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	data := pgtest.TempDir(t)
	for _, c := range []struct {
		env  []string
		args []string
		want []string
	}{
		{cleanEnv("INLET_LISTEN="+freeAddr(t), "INLET_METRICS_LISTEN="+freeAddr(t), "INLET_ADMIN_LISTEN="+busy.Addr().String()), nil,
			[]string{"admin.listen " + busy.Addr().String(), "already in use", "--admin-listen", "INLET_ADMIN_LISTEN"}},
		{cleanEnv(), []string{"--listen", freeAddr(t), "--metrics-listen", busy.Addr().String(), "--admin-listen", "off"},
			[]string{"ingress.metrics_listen " + busy.Addr().String(), "--metrics-listen", "INLET_METRICS_LISTEN", "--port-base"}},
		{cleanEnv(), []string{"--listen", busy.Addr().String(), "--metrics-listen", "off", "--admin-listen", freeAddr(t)},
			[]string{"ingress.listen " + busy.Addr().String(), "--listen", "INLET_LISTEN"}},
	} {
		_, errOut, code := runInlet(t, c.env, append([]string{"dev", "--data-dir", data}, c.args...)...)
		if code != 1 || strings.Count(strings.TrimSpace(errOut), "\n") != 0 {
			t.Errorf("inlet dev %v with %s in use: exit %d, want 1 and one line:\n%s", c.args, busy.Addr(), code, errOut)
		}
		for _, w := range c.want {
			if !strings.Contains(errOut, w) {
				t.Errorf("inlet dev %v: %q lacks %q", c.args, errOut, w)
			}
		}
	}
	if _, err := os.Stat(filepath.Join(data, "pg")); !os.IsNotExist(err) {
		t.Errorf("a local PostgreSQL was set up before the listeners were checked (%v)", err)
	}
}

// A second Ctrl-C (here while ingress drains a request still arriving)
// exits at once but still stops the local PostgreSQL: it runs in a process
// group of its own, so no terminal signal reaches it, and it used to be left
// running with nobody to stop it.
func TestDevSecondInterruptStopsPostgreSQL(t *testing.T) {
	t.Parallel()
	data := pgtest.TempDir(t)
	env := devEnv(t)
	p := start(t, env, "dev", "--data-dir", data)
	p.waitOutput("Ctrl-C stops.", 3*time.Minute)
	if len(postgresOf(data)) == 0 {
		t.Fatal("no PostgreSQL process names the data directory")
	}
	// A request whose body is still arriving holds the drain (until its
	// read times out), so the second signal comes while it drains.
	var webhook string
	for _, kv := range env {
		if a, ok := strings.CutPrefix(kv, "INLET_LISTEN="); ok {
			webhook = a
		}
	}
	conn, err := net.Dial("tcp", webhook)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "POST /webhooks/stripe HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n{"); err != nil {
		t.Fatal(err)
	}
	_ = p.cmd.Process.Signal(syscall.SIGINT)
	p.waitLog("draining ingress", 30*time.Second)
	_ = p.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-p.done:
	case <-time.After(60 * time.Second):
		t.Fatal("inlet dev did not exit within 60s of a second SIGINT")
	}
	if pids := postgresOf(data); len(pids) > 0 {
		killOrphans(data)
		t.Fatalf("PostgreSQL processes %v of %s outlived inlet dev (%v)\n%s", pids, data, p.err, p.errOut())
	}
}

// Ctrl-C in a terminal signals the whole foreground process group: under
// go run or go tool task run the wrapper saw it too, and go run exits 1
// after any interrupt however cleanly inlet stopped ("Failed to run task").
// inlet dev now takes the terminal's Ctrl-C for itself: the wrapper (here a
// shell trapping SIGINT, as go run does) sees none, and ends with inlet's
// exit status, 0.
func TestDevCtrlCUnderAWrapperExitsZero(t *testing.T) {
	t.Parallel()
	ptm, pts := openPTY(t)
	data := pgtest.TempDir(t)
	cmd := exec.Command("sh", "-c", `trap 'echo wrapper-interrupted' INT; "$0" "$@"; echo "inlet-exit=$?"`, inletBin, "dev", "--data-dir", data)
	cmd.Env = devEnv(t)
	cmd.Dir = t.TempDir()
	cmd.Stdin, cmd.Stdout, cmd.Stderr = pts, pts, pts
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pts.Close()
	var mu sync.Mutex
	var out bytes.Buffer
	read := make(chan struct{})
	go func() {
		defer close(read)
		buf := make([]byte, 4096)
		for {
			n, err := ptm.Read(buf)
			mu.Lock()
			out.Write(buf[:n])
			mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	output := func() string { mu.Lock(); defer mu.Unlock(); return out.String() }
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		killOrphans(data) // none should be left; stop any that is
		if t.Failed() {
			t.Logf("terminal:\n%s", output())
		}
	})
	testwait.Eventually(t, 3*time.Minute, "inlet dev ready", func() (bool, string) {
		return strings.Contains(output(), "Ctrl-C stops."), ""
	})
	if _, err := ptm.Write([]byte{3}); err != nil { // Ctrl-C
		t.Fatal(err)
	}
	testwait.Eventually(t, 60*time.Second, "inlet dev exited", func() (bool, string) {
		return strings.Contains(output(), "inlet-exit="), ""
	})
	if o := output(); !strings.Contains(o, "inlet-exit=0") || strings.Contains(o, "wrapper-interrupted") {
		t.Fatalf("after one Ctrl-C: want inlet-exit=0 and no interrupt seen by the wrapper:\n%s", o)
	}
}

// openPTY opens a pseudo-terminal: its controlling side and the terminal.
func openPTY(t *testing.T) (ptm, pts *os.File) {
	t.Helper()
	ptm, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	t.Cleanup(func() { ptm.Close() })
	var unlock int32
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, ptm.Fd(), syscall.TIOCSPTLCK, uintptr(unsafe.Pointer(&unlock))); e != 0 {
		t.Fatalf("unlock pty: %v", e)
	}
	var n uint32
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, ptm.Fd(), syscall.TIOCGPTN, uintptr(unsafe.Pointer(&n))); e != 0 {
		t.Fatalf("pty number: %v", e)
	}
	pts, err = os.OpenFile("/dev/pts/"+strconv.Itoa(int(n)), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	return ptm, pts
}

// Closing its terminal (SIGHUP) stops inlet dev as Ctrl-C does, its local
// PostgreSQL with it; SIGHUP used to kill inlet dev outright and leave that
// PostgreSQL running.
func TestDevHangupStopsPostgreSQL(t *testing.T) {
	t.Parallel()
	data := pgtest.TempDir(t)
	p := start(t, devEnv(t), "dev", "--data-dir", data)
	p.waitOutput("Ctrl-C stops.", 3*time.Minute)
	_ = p.cmd.Process.Signal(syscall.SIGHUP)
	select {
	case <-p.done:
	case <-time.After(60 * time.Second):
		t.Fatal("inlet dev did not exit within 60s of SIGHUP")
	}
	if pids := postgresOf(data); len(pids) > 0 || p.err != nil {
		killOrphans(data)
		t.Fatalf("after SIGHUP: exit %v, PostgreSQL processes %v of %s left\n%s", p.err, pids, data, p.errOut())
	}
}
