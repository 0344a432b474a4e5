package tests

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stripe/stripe-go/v82/webhook"

	"github.com/inlet-dev/inlet/internal/natstest"
	"github.com/inlet-dev/inlet/internal/pgtest"
	"github.com/inlet-dev/inlet/internal/testwait"
)

// consumers/example, a consumer service built only on the public SDK, runs
// as its own process beside inlet ingress and inlet streamer: it registers
// its handlers' subscriptions and completes their jobs.
func TestExampleConsumerService(t *testing.T) {
	t.Parallel()
	nats := natstest.Start(t)
	dbURL := pgtest.NewDatabase(t)
	addr := freeAddr(t)
	cfg := writeFile(t, t.TempDir(), "inlet.yaml", fmt.Sprintf(`
database_url: ${DATABASE_URL}
ingress:
  listen: %q
  metrics_listen: "127.0.0.1:0"
sources:
  - {name: stripe, type: stripe, secrets: ["whsec_example_e2e"]}
  - {name: github, type: github, secrets: ["example-e2e"]}
bus: {kind: nats, url: %q}
streamer: {health_listen: "127.0.0.1:0", poll_interval: 250ms}
`, addr, nats.URL()))
	env := cleanEnv("DATABASE_URL=" + dbURL)

	ex := &proc{t: t, lines: make(chan string, 100), done: make(chan struct{})}
	ex.cmd = exec.Command(exampleBin, "--database-url", dbURL, "--nats-url", nats.URL())
	ex.cmd.Env = cleanEnv()
	ex.cmd.Stdout = lockedWriter{&ex.mu, &ex.stdout}
	ex.cmd.Stderr = lockedWriter{&ex.mu, &ex.stderr}
	if err := ex.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { ex.err = ex.cmd.Wait(); close(ex.done) }()
	t.Cleanup(func() { _ = ex.cmd.Process.Kill(); <-ex.done })
	ex.waitLog("consumers started", 30*time.Second)

	st := start(t, env, "streamer", "--config", cfg)
	st.waitLog("streamer started", 30*time.Second)
	ing := start(t, env, "ingress", "--config", cfg)
	ing.waitLog("ingress listening", 30*time.Second)

	invoice := []byte(`{"id":"evt_example_1","type":"invoice.paid","data":{"object":{"id":"in_1"}}}`)
	signed := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: invoice, Secret: "whsec_example_e2e"})
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/webhooks/stripe", bytes.NewReader(invoice))
	req.Header.Set("Stripe-Signature", signed.Header)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("stripe webhook: %d", resp.StatusCode)
	}
	sendGitHub(t, "http://"+addr, "example-e2e", "example-delivery-1", []byte(`{"ref":"refs/heads/main"}`))

	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	testwait.Eventually(t, 30*time.Second, "both example jobs completed", func() (bool, string) {
		var n int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM webhook_ingress.jobs WHERE status = 'completed'
			AND handler IN ('example-invoices', 'example-pushes')`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 2, fmt.Sprintf("%d of 2 completed; example log:\n%s", n, ex.errOut())
	})
	_ = ex.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-ex.done:
		if ex.err != nil {
			t.Fatalf("example exited with %v after SIGTERM", ex.err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("example did not stop on SIGTERM")
	}
}
