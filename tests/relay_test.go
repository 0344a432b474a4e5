package tests

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/internal/pgtest"
)

// inlet relay in front of inlet ingress, as separate processes: inlet send
// signs as GitHub would and posts to the relay, which verifies and forwards
// the bytes signed to the ingress, which checks both signatures and stores
// the event. The relay needs no database, and its log holds no body.
func TestRelayToIngress(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t)
	dir := t.TempDir()
	ingressAddr, relayAddr := freeAddr(t), freeAddr(t)
	const canary = "relay-e2e-canary-5d1e"
	ingressCfg := writeFile(t, dir, "ingress.yaml", `
database_url: ${DATABASE_URL}
ingress:
  listen: "`+ingressAddr+`"
  metrics_listen: "127.0.0.1:0"
sources:
  - name: github
    type: github
    secrets: ["${GH_SECRET}"]
    relay_secrets: ["${RELAY_SECRET}"]
`)
	relayCfg := writeFile(t, dir, "relay.yaml", `
relay:
  listen: "`+relayAddr+`"
  target: "http://`+ingressAddr+`"
  allow_insecure_target: true
  secrets: ["${RELAY_SECRET}"]
sources:
  - name: github
    type: github
    secrets: ["${GH_SECRET}"]
`)
	secrets := []string{"GH_SECRET=e2e-relay-github-secret", "RELAY_SECRET=e2e-relay-secret-0123456789"}
	ing := start(t, cleanEnv(append(secrets, "DATABASE_URL="+url)...), "ingress", "--config", ingressCfg)
	ing.waitLog("ingress listening", 30*time.Second)
	relayEnv := cleanEnv(secrets...) // no DATABASE_URL: the relay stores nothing
	rel := start(t, relayEnv, "relay", "--config", relayCfg)
	rel.waitLog("relay listening", 30*time.Second)
	if got := httpGet(t, "http://"+relayAddr+"/healthz"); !strings.Contains(got, `"ok"`) {
		t.Fatalf("relay /healthz: %s", got)
	}

	body := `{"ref":"refs/heads/main","note":"` + canary + `"}`
	out, errOut, code := runInlet(t, relayEnv, "send", "github", "--config", relayCfg, "--url", "http://"+relayAddr, "--id", "relay-e2e-1", "--body", body)
	if code != 0 || !strings.Contains(out, `"stored"`) {
		t.Fatalf("send through the relay: exit %d\n%s%s", code, out, errOut)
	}
	// Straight to the ingress, with a good GitHub signature but no relay's:
	// refused.
	out, _, code = runInlet(t, relayEnv, "send", "github", "--config", relayCfg, "--url", "http://"+ingressAddr, "--id", "relay-e2e-2")
	if code == 0 || !strings.Contains(out, "relay_signature_missing") {
		t.Fatalf("direct send: exit %d\n%s", code, out)
	}

	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var raw []byte
	var headers map[string][]string
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM webhook_ingress.events`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("%d events (%v), want 1", n, err)
	}
	err = conn.QueryRow(ctx, `SELECT raw_body, headers FROM webhook_ingress.events
		WHERE provider = 'github' AND external_event_id = 'relay-e2e-1' AND signature_verified`).Scan(&raw, &headers)
	if err != nil {
		t.Fatal(err)
	}
	if string(raw) != body {
		t.Fatalf("stored body %q, want %q", raw, body)
	}
	if len(headers["X-Hub-Signature-256"]) != 1 || headers["X-Github-Delivery"][0] != "relay-e2e-1" {
		t.Fatalf("stored headers lack GitHub's: %v", headers)
	}
	for name := range headers {
		if strings.HasPrefix(name, "Inlet-Relay-") {
			t.Fatalf("stored headers hold %s", name)
		}
	}
	out, errOut, code = runInlet(t, cleanEnv(append(secrets, "DATABASE_URL="+url)...), "events", "verify", "--since", "1h", "--config", ingressCfg)
	if code != 0 {
		t.Fatalf("events verify of the relayed event: exit %d\n%s%s", code, out, errOut)
	}

	if err := rel.stop(); err != nil {
		t.Fatalf("relay exit after SIGTERM: %v", err)
	}
	logs := rel.errOut()
	if !strings.Contains(logs, "relay stopped") || !strings.Contains(logs, `"msg":"webhook relayed"`) {
		t.Fatalf("relay log lacks the relayed webhook or the drain:\n%s", logs)
	}
	if strings.Contains(logs, canary) || strings.Contains(logs, "e2e-relay-secret") || strings.Contains(ing.errOut(), canary) {
		t.Fatalf("a log holds the body or a secret:\nrelay:\n%s\ningress:\n%s", logs, ing.errOut())
	}
	help, _, code := runInlet(t, relayEnv, "relay", "--help")
	if code != 0 || !strings.Contains(help, "Usage: inlet relay") || !strings.Contains(help, "-config") {
		t.Fatalf("relay --help: exit %d\n%s", code, help)
	}
}
