package tests

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/consumers/httpforward"
	"github.com/inlet-dev/inlet/internal/pgtest"
	"github.com/inlet-dev/inlet/internal/testwait"
)

// forwardTarget is the internal service an http-forward handler posts to.
type forwardTarget struct {
	mu       sync.Mutex
	bodies   [][]byte
	keys     []string
	verified []error
	got      chan struct{}
	block    chan struct{} // first request waits on it
	first    bool
}

func newForwardTarget(t *testing.T, secret string) (*forwardTarget, string) {
	ft := &forwardTarget{got: make(chan struct{}, 10), block: make(chan struct{}), first: true}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		ft.mu.Lock()
		ft.bodies = append(ft.bodies, body)
		ft.keys = append(ft.keys, r.Header.Get(httpforward.HeaderIdempotencyKey))
		ft.verified = append(ft.verified, httpforward.Verify(secret, r.Header, body, 0, time.Now()))
		first := ft.first
		ft.first = false
		ft.mu.Unlock()
		ft.got <- struct{}{}
		if first {
			select { // the handler is mid-flight when the process is killed
			case <-ft.block:
			case <-r.Context().Done():
			}
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(func() { close(ft.block); srv.Close() })
	return ft, srv.URL
}

// A consumer killed mid-handler (SIGKILL of the whole inlet dev process):
// after a restart its lease expires, the job is delivered again with the same
// idempotency key, and completes. The history shows both attempts.
func TestConsumerKilledMidHandlerIsRedelivered(t *testing.T) {
	t.Parallel()
	const secret = "forward-secret-0123456789"
	ft, target := newForwardTarget(t, secret)
	dbURL := pgtest.NewDatabase(t)
	addr := freeAddr(t)
	dir := t.TempDir()
	cfg := writeFile(t, dir, "inlet.yaml", `
database_url: ${DATABASE_URL}
ingress:
  listen: "`+addr+`"
  metrics_listen: "127.0.0.1:0"
sources:
  - name: stripe
    type: stripe
    secrets: ["whsec_crash_test"]
streamer:
  lease_duration: 2s
  reap_interval: 200ms
  poll_interval: 200ms
consumer:
  lease_extend: 1s
  handlers:
    - name: billing
      type: http-forward
      url: "`+target+`"
      secret: "`+secret+`"
      timeout: 60s
`)
	env := cleanEnv("DATABASE_URL=" + dbURL)
	first := start(t, env, "dev", "--config", cfg, "--admin-listen", "off") // a file without admin: would take 127.0.0.1:8084
	first.waitOutput("Ctrl-C stops.", time.Minute)
	body := `{"id":"evt_crash","type":"invoice.paid","note":"caf` + "\u00e9" + `"}`
	bodyFile := writeFile(t, dir, "body.json", body)
	out, errOut, code := runInlet(t, env, "send", "stripe", "--config", cfg, "--url", "http://"+addr, "--body-file", bodyFile)
	if code != 0 {
		t.Fatalf("send: %s %s", out, errOut)
	}
	select {
	case <-ft.got:
	case <-time.After(20 * time.Second):
		t.Fatal("the handler never started")
	}
	if err := first.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-first.done

	second := start(t, env, "dev", "--config", cfg, "--admin-listen", "off")
	second.waitOutput("Ctrl-C stops.", time.Minute)
	select {
	case <-ft.got:
	case <-time.After(30 * time.Second):
		t.Fatal("the job was not delivered again after the consumer was killed")
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	testwait.Eventually(t, 15*time.Second, "the job completed", func() (bool, string) {
		var status string
		if err := conn.QueryRow(ctx, `SELECT status FROM webhook_ingress.jobs WHERE handler = 'billing'`).Scan(&status); err != nil {
			t.Fatal(err)
		}
		return status == "completed", "job " + status
	})
	// The history through the view attempts: the expired lease from
	// job_attempts, the success from the job row.
	rows, _ := conn.Query(ctx, `SELECT a.outcome FROM webhook_ingress.attempts a JOIN webhook_ingress.jobs j ON j.id = a.job_id ORDER BY a.id`)
	outcomes, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || strings.Join(outcomes, ",") != "lease_expired,completed" {
		t.Fatalf("history %v (%v), want lease_expired then completed", outcomes, err)
	}
	ft.mu.Lock()
	defer ft.mu.Unlock()
	if len(ft.bodies) != 2 || ft.keys[0] == "" || ft.keys[0] != ft.keys[1] {
		t.Fatalf("%d deliveries, idempotency keys %q", len(ft.bodies), ft.keys)
	}
	for i, b := range ft.bodies {
		if !bytes.Equal(b, []byte(body)) || ft.verified[i] != nil {
			t.Fatalf("delivery %d: body %q, signature check %v", i, b, ft.verified[i])
		}
	}
	if err := second.stop(); err != nil {
		t.Fatalf("second inlet dev after SIGTERM: %v", err)
	}
}
