// Package natstest runs a real nats-server process (with JetStream) for tests.
// The server is built once per test binary from the nats-server Go module the
// project pins as a tool (`go tool nats-server`), so nothing is installed by
// hand. Each Server gets its own port and store directory, and can be stopped,
// killed and restarted on the same port and store.
package natstest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/inlet-dev/inlet/internal/freeport"
)

var (
	buildOnce sync.Once
	buildErr  error
	binDir    string
	binPath   string
)

// Binary builds (once) and returns the nats-server binary's path. It asks
// `go tool -n nats-server` first (a tool of go.mod): the go command keeps that
// build in its cache, so test binaries and runs after the first link nothing.
// Outside the workspace it falls back to `go build` into a temporary
// directory.
func Binary() (string, error) {
	buildOnce.Do(func() {
		if p := os.Getenv("INLET_NATS_SERVER"); p != "" {
			binPath = p
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		if out, err := exec.CommandContext(ctx, "go", "tool", "-n", "nats-server").Output(); err == nil {
			if p := strings.TrimSpace(string(out)); p != "" {
				if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
					binPath = p
					return
				}
			}
		}
		binDir, buildErr = os.MkdirTemp("", "inlet-nats-bin-")
		if buildErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "nats-server")
		out, err := exec.CommandContext(ctx, "go", "build", "-o", binPath, "github.com/nats-io/nats-server/v2").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("build nats-server from its Go module: %v\n%s", err, out)
		}
	})
	return binPath, buildErr
}

// Cleanup removes the built binary; call it from TestMain after m.Run.
func Cleanup() {
	if binDir != "" {
		os.RemoveAll(binDir)
	}
}

// Server is one nats-server process.
type Server struct {
	t     testing.TB
	bin   string
	port  int
	store string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// Start runs a JetStream-enabled nats-server on a free loopback port until the
// test ends.
func Start(t testing.TB) *Server {
	t.Helper()
	bin, err := Binary()
	if err != nil {
		t.Fatal(err)
	}
	// Below the ephemeral range: the port is bound again at each Restart.
	port, err := freeport.Pick()
	if err != nil {
		t.Fatal(err)
	}
	store, err := os.MkdirTemp("", "inlet-nats-store-")
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{t: t, bin: bin, port: port, store: store}
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.Stop()
		os.RemoveAll(store)
	})
	return s
}

// URL is the client URL.
func (s *Server) URL() string { return "nats://127.0.0.1:" + strconv.Itoa(s.port) }

// Restart starts the server again (same port, same store) after Stop or Kill,
// and waits until it answers.
func (s *Server) Restart() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		return errors.New("natstest: already running")
	}
	cmd := exec.Command(s.bin, "-a", "127.0.0.1", "-p", strconv.Itoa(s.port), "-js", "-sd", s.store)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	logf, err := os.OpenFile(filepath.Join(s.store, "server.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start nats-server: %w", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); logf.Close(); close(done) }()
	s.cmd, s.done = cmd, done
	deadline := time.Now().Add(30 * time.Second)
	for {
		nc, err := nats.Connect(s.URL(), nats.Timeout(time.Second))
		if err == nil {
			js, jerr := nc.JetStream()
			if jerr == nil {
				_, jerr = js.AccountInfo()
			}
			nc.Close()
			if jerr == nil {
				return nil
			}
			err = jerr
		}
		select {
		case <-done:
			s.cmd = nil
			b, _ := os.ReadFile(filepath.Join(s.store, "server.log"))
			return fmt.Errorf("nats-server exited at start:\n%s", b)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("nats-server not ready after 30s: %v", err)
		}
	}
}

// Stop shuts the server down (SIGTERM) and waits.
func (s *Server) Stop() { s.signal(syscall.SIGTERM) }

// Kill kills the server (SIGKILL), as a crash would.
func (s *Server) Kill() { s.signal(syscall.SIGKILL) }

func (s *Server) signal(sig syscall.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(sig)
	select {
	case <-s.done:
	case <-time.After(30 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
	s.cmd = nil
}
