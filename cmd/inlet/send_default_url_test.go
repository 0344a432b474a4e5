package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/internal/freeport"
	"github.com/inlet-dev/inlet/internal/pgtest"
	"github.com/inlet-dev/inlet/internal/testwait"
)

// clearDevEnv empties what would move inlet dev's listeners or database
// from outside the test.
func clearDevEnv(t *testing.T) {
	t.Helper()
	for _, v := range []string{"INLET_LISTEN", "INLET_METRICS_LISTEN", "INLET_ADMIN_LISTEN", "DATABASE_URL", "STRIPE_WEBHOOK_SECRET"} {
		t.Setenv(v, "")
	}
}

// recordingIngress is a real HTTP server on 127.0.0.1:port standing in for
// an ingress: it answers 200 and records the paths it was sent.
func recordingIngress(t *testing.T, port int) func() []string {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var paths []string
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		paths = append(paths, r.Method+" "+r.URL.Path)
		mu.Unlock()
		fmt.Fprint(w, `{"status":"stored"}`)
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), paths...)
	}
}

// Without --url, inlet send posts to the ingress.listen of the config file
// (a wildcard host meaning this machine), not to a fixed localhost:8080.
// Before the fix --url defaulted to http://localhost:8080 whatever the
// configuration said: each case failed with "connection refused" on 8080
// (or reached whatever listens there) and this server got nothing.
func TestSendDefaultsToTheConfiguredIngressListen(t *testing.T) {
	clearDevEnv(t)
	for _, host := range []string{"", "0.0.0.0", "127.0.0.1"} {
		t.Run("listen "+host+":PORT", func(t *testing.T) {
			t.Chdir(t.TempDir())
			port, err := freeport.Pick()
			if err != nil {
				t.Fatal(err)
			}
			got := recordingIngress(t, port)
			cfg := fmt.Sprintf("ingress:\n  listen: %q\nsources:\n  - name: stripe\n    type: stripe\n    secrets: [\"whsec_send_default_test\"]\n",
				net.JoinHostPort(host, strconv.Itoa(port)))
			if err := os.WriteFile("inlet.yaml", []byte(cfg), 0o600); err != nil {
				t.Fatal(err)
			}
			var out, errOut bytes.Buffer
			if err := run(context.Background(), &environment{stdout: &out, stderr: &errOut}, []string{"send", "stripe"}); err != nil {
				t.Fatalf("inlet send stripe with ingress.listen %s:%d: %v\n%s", host, port, err, out.String())
			}
			if p := got(); len(p) != 1 || p[0] != "POST /webhooks/stripe" {
				t.Errorf("the configured ingress got %q, want one POST /webhooks/stripe", p)
			}
			if want := fmt.Sprintf("http://localhost:%d/webhooks/stripe", port); host != "127.0.0.1" && !strings.Contains(out.String(), want) {
				t.Errorf("inlet send printed %q, want the URL %s", out.String(), want)
			}
		})
	}
}

// syncBuffer is a bytes.Buffer that a command's goroutine writes while the
// test reads it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// With inlet dev running in a directory on another port (--port-base),
// inlet send without --url, run there or in a subdirectory, reaches that
// ingress: dev records its URL in .inlet/ingress_url, and removes it when
// it stops. The event is in the database dev uses. Before the fix send
// posted to localhost:8080 and failed ("connection refused"), and dev wrote
// no .inlet/ingress_url.
func TestSendFindsTheIngressOfInletDev(t *testing.T) {
	clearDevEnv(t)
	dbURL := pgtest.NewDatabase(t)
	t.Setenv("DATABASE_URL", dbURL) // dev uses it instead of starting a PostgreSQL of its own
	dir := t.TempDir()
	t.Chdir(dir)
	port, err := freeport.Pick()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	devOut := &syncBuffer{}
	finished := make(chan struct{})
	var devErr error
	go func() {
		defer close(finished)
		devErr = run(ctx, &environment{stdout: devOut, stderr: devOut},
			[]string{"dev", "--port-base", strconv.Itoa(port), "--metrics-listen", "off", "--admin-listen", "off"})
	}()
	// stop stops inlet dev and waits for it; also on a failure, before the
	// database is dropped (cleanups run last-registered first).
	stop := func() error {
		cancel()
		select {
		case <-finished:
			return devErr
		case <-time.After(30 * time.Second):
			return errors.New("inlet dev did not stop within 30s of its cancel")
		}
	}
	t.Cleanup(func() { _ = stop() })
	// The walkthrough is printed once every service runs.
	testwait.Eventually(t, 60*time.Second, "inlet dev started", func() (bool, string) {
		select {
		case <-finished:
			t.Fatalf("inlet dev ended before it started: %v\n%s", devErr, devOut.String())
		default:
		}
		return strings.Contains(devOut.String(), "Ctrl-C stops."), devOut.String()
	})

	sub := filepath.Join(dir, "a", "b")
	if err := os.MkdirAll(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	for i, wd := range []string{dir, sub} {
		t.Chdir(wd)
		var out, errOut bytes.Buffer
		id := fmt.Sprintf("evt_send_default_%d", i)
		if err := run(context.Background(), &environment{stdout: &out, stderr: &errOut}, []string{"send", "stripe", "--id", id}); err != nil {
			t.Fatalf("inlet send stripe from %s, inlet dev on port %d: %v\n%s", wd, port, err, out.String())
		}
		if want := fmt.Sprintf("http://localhost:%d/webhooks/stripe", port); !strings.Contains(out.String(), want) {
			t.Errorf("inlet send printed %q, want the URL %s", out.String(), want)
		}
		conn, err := pgx.Connect(context.Background(), dbURL)
		if err != nil {
			t.Fatal(err)
		}
		var n int
		err = conn.QueryRow(context.Background(), `SELECT count(*) FROM webhook_ingress.events WHERE provider = 'stripe' AND external_event_id = $1`, id).Scan(&n)
		conn.Close(context.Background())
		if err != nil || n != 1 {
			t.Errorf("events of id %s in inlet dev's database: %d, %v; want 1", id, n, err)
		}
	}

	if err := stop(); err != nil {
		t.Fatalf("inlet dev: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, devDataDir, "ingress_url")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("after inlet dev stopped, .inlet/ingress_url: %v; want it removed (a later send must not aim at a stopped dev)", err)
	}
}
