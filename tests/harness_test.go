package tests

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/internal/freeport"
	"github.com/inlet-dev/inlet/internal/natstest"
	"github.com/inlet-dev/inlet/internal/pgtest"
	"github.com/inlet-dev/inlet/internal/testwait"
)

// inletBin, exampleBin and txconsumerBin are cmd/inlet, consumers/example
// and testdata/txconsumer, built once for the run (in one go build, which
// links them side by side), with the race detector and without DWARF (the
// tests read none; a panic's trace does not need it): less to link.
var inletBin, exampleBin, txconsumerBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "inlet-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	inletBin, exampleBin, txconsumerBin = filepath.Join(dir, "inlet"), filepath.Join(dir, "example"), filepath.Join(dir, "txconsumer")
	build := exec.Command("go", "build", "-race", "-ldflags=-w", "-o", dir+string(filepath.Separator), "../cmd/inlet", "../consumers/example", "./testdata/txconsumer")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build inlet and consumers/example:", err)
		os.Exit(1)
	}
	code := pgtest.Main(m)
	natstest.Cleanup()
	os.RemoveAll(dir)
	os.Exit(code)
}

// proc is a running inlet process with its output captured.
type proc struct {
	t      *testing.T
	cmd    *exec.Cmd
	mu     sync.Mutex
	stdout bytes.Buffer
	stderr bytes.Buffer
	lines  chan string
	done   chan struct{}
	err    error
}

type lockedWriter struct {
	mu  *sync.Mutex
	buf *bytes.Buffer
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Write(p)
}

// cleanEnv is the environment without DATABASE_URL and with extra set.
//
// The inlet binary is built with -race, whose runtime sleeps a second before
// every exit (GORACE atexit_sleep_ms) so late goroutines can still report;
// these tests run inlet a few hundred times, mostly as short commands, so
// that second is set to 0 unless GORACE says otherwise. A race found while
// running still makes inlet exit 66.
func cleanEnv(extra ...string) []string {
	var env []string
	gorace := false
	for _, kv := range os.Environ() {
		gorace = gorace || strings.HasPrefix(kv, "GORACE=")
		if !strings.HasPrefix(kv, "DATABASE_URL=") {
			env = append(env, kv)
		}
	}
	if !gorace {
		env = append(env, "GORACE=atexit_sleep_ms=0")
	}
	return append(env, extra...)
}

func start(t *testing.T, env []string, args ...string) *proc {
	t.Helper()
	return startIn(t, t.TempDir(), inletBin, env, args...)
}

// startBin runs the program bin (inletBin, exampleBin, txconsumerBin) as
// start runs inlet.
func startBin(t *testing.T, bin string, env []string, args ...string) *proc {
	t.Helper()
	return startIn(t, t.TempDir(), bin, env, args...)
}

// startIn runs bin with dir as the working directory.
func startIn(t *testing.T, dir, bin string, env []string, args ...string) *proc {
	t.Helper()
	p := &proc{t: t, lines: make(chan string, 1000), done: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Env = env
	p.cmd.Dir = dir
	outR, outW := io.Pipe()
	p.cmd.Stdout = outW
	p.cmd.Stderr = lockedWriter{&p.mu, &p.stderr}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(outR)
		for sc.Scan() {
			p.mu.Lock()
			p.stdout.WriteString(sc.Text() + "\n")
			p.mu.Unlock()
			select {
			case p.lines <- sc.Text():
			default:
			}
		}
	}()
	go func() {
		p.err = p.cmd.Wait()
		outW.Close()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-p.done:
			case <-time.After(30 * time.Second):
				_ = p.cmd.Process.Kill()
				<-p.done
			}
		}
		if t.Failed() {
			t.Logf("%s %s stdout:\n%s\nstderr:\n%s", filepath.Base(bin), strings.Join(args, " "), p.out(), p.errOut())
		}
	})
	return p
}

func (p *proc) out() string    { p.mu.Lock(); defer p.mu.Unlock(); return p.stdout.String() }
func (p *proc) errOut() string { p.mu.Lock(); defer p.mu.Unlock(); return p.stderr.String() }

// waitOutput waits for a stdout line containing s.
func (p *proc) waitOutput(s string, within time.Duration) {
	p.t.Helper()
	deadline := time.After(within)
	for {
		if strings.Contains(p.out(), s) {
			return
		}
		select {
		case <-p.lines:
		case <-p.done:
			if strings.Contains(p.out(), s) {
				return
			}
			p.t.Fatalf("inlet exited (%v) before printing %q\nstderr:\n%s", p.err, s, p.errOut())
		case <-deadline:
			p.t.Fatalf("no %q on stdout within %s", s, within)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// waitLog waits for stderr to contain s.
func (p *proc) waitLog(s string, within time.Duration) {
	p.t.Helper()
	testwait.Eventually(p.t, within, fmt.Sprintf("%q in the log", s), func() (bool, string) {
		log := p.errOut()
		return strings.Contains(log, s), "the log:\n" + log
	})
}

// stop sends SIGTERM and returns the exit error.
func (p *proc) stop() error {
	p.t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return p.err
	case <-time.After(60 * time.Second):
		p.t.Fatal("inlet did not exit within 60s of SIGTERM")
		return nil
	}
}

// runInlet runs a short command to completion.
func runInlet(t *testing.T, env []string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	return runInletIn(t, t.TempDir(), env, args...)
}

// runInletIn is runInlet with dir as the working directory.
func runInletIn(t *testing.T, dir string, env []string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, inletBin, args...)
	cmd.Env = env
	cmd.Dir = dir
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	code = 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("run inlet %v: %v", args, err)
	}
	return o.String(), e.String(), code
}

// freeAddr is a loopback address for a process to listen on (and again after
// a restart): its port is below the ephemeral range, so no outgoing
// connection takes it in the meantime.
func freeAddr(t *testing.T) string {
	t.Helper()
	p, err := freeport.Pick()
	if err != nil {
		t.Fatal(err)
	}
	return "127.0.0.1:" + strconv.Itoa(p)
}

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// httpGet is the body of GET url; it fails the test on any error or a status
// other than 200.
func httpGet(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d (%v)\n%s", url, resp.StatusCode, err, b)
	}
	return string(b)
}
