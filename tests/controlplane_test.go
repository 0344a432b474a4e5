package tests

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/internal/pgtest"
	"github.com/inlet-dev/inlet/internal/testwait"
)

// inlet control-plane and inlet dev with the reporter on, each its own
// process: webhooks reach a handler that succeeds and one whose internal
// service answers 500; the control plane's page for the tenant shows the
// jobs by status and the failure class, and what it stored is metadata only.
func TestControlPlaneShowsReportedAttempts(t *testing.T) {
	t.Parallel()
	dbURL, cpDB := pgtest.NewDatabase(t), pgtest.NewEmptyDatabase(t)
	const tenantToken = "e2e-control-plane-tenant-token"
	failing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		http.Error(w, "internal service is down", http.StatusInternalServerError)
	}))
	t.Cleanup(failing.Close)

	cpAddr := freeAddr(t)
	dir := t.TempDir()
	cpCfg := writeFile(t, dir, "control-plane.yaml", fmt.Sprintf(`
control_plane:
  listen: %q
  database_url: ${CP_DATABASE_URL}
  tenants:
    - name: acme
      token: ${ACME_TOKEN}
    - name: other
      token: ${OTHER_TOKEN}
`, cpAddr))
	cpEnv := cleanEnv("CP_DATABASE_URL="+cpDB, "ACME_TOKEN="+tenantToken, "OTHER_TOKEN=e2e-control-plane-other-token")
	cp := start(t, cpEnv, "control-plane", "--config", cpCfg)
	cp.waitLog("control plane listening", 30*time.Second)

	addr := freeAddr(t)
	devCfg := writeFile(t, dir, "inlet.yaml", fmt.Sprintf(`
database_url: ${DATABASE_URL}
ingress:
  listen: %q
  metrics_listen: "127.0.0.1:0"
sources:
  - name: github
    type: github
    secrets: ["e2e-control-plane-secret"]
streamer:
  poll_interval: 250ms
consumer:
  handlers:
    - name: log
      type: log
    - name: downstream
      type: http-forward
      url: %q
      secret: "e2e-control-plane-forward-secret"
      max_attempts: 1
      timeout: 2s
reporter:
  url: http://%s
  token: ${REPORT_TOKEN}
  key: ${REPORT_KEY}
  interval: 200ms
`, addr, failing.URL, cpAddr))
	env := cleanEnv("DATABASE_URL="+dbURL, "REPORT_TOKEN="+tenantToken, "REPORT_KEY=e2e-control-plane-hmac-key")
	dev := start(t, env, "dev", "--config", devCfg, "--admin-listen", "off") // a file without admin: would take 127.0.0.1:8084
	dev.waitOutput("Ctrl-C stops.", 60*time.Second)

	const n = 3
	for i := range n {
		out, errOut, code := runInlet(t, env, "send", "github", "--config", devCfg, "--url", "http://"+addr, "--id", fmt.Sprintf("cp-%d", i))
		if code != 0 || !strings.Contains(out, "stored") {
			t.Fatalf("inlet send: %s %s", out, errOut)
		}
	}

	page := func(user, pass string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, "http://"+cpAddr+"/", nil)
		req.SetBasicAuth(user, pass)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	want := []string{
		fmt.Sprintf(`data-status="completed">%d<`, n),
		fmt.Sprintf(`data-status="dead_letter">%d<`, n),
		fmt.Sprintf(`data-class="http_5xx">%d<`, n),
		fmt.Sprintf(`data-attempts="">%d<`, 2*n),
	}
	var body string
	testwait.Eventually(t, 60*time.Second, "acme's page showing every reported attempt", func() (bool, string) {
		code, b := page("acme", tenantToken)
		if code != 200 {
			t.Fatalf("acme's page: %d\n%s", code, b)
		}
		body = b
		for _, w := range want {
			if !strings.Contains(body, w) {
				return false, fmt.Sprintf("no %s in:\n%s\ndev stderr:\n%s", w, body, dev.errOut())
			}
		}
		return true, ""
	})
	if strings.Contains(body, "<script") {
		t.Error("the page has a script")
	}
	if code, _ := page("acme", "not-the-token-0123456789"); code != 401 {
		t.Errorf("page with a wrong token: %d, want 401", code)
	}
	if _, other := page("other", "e2e-control-plane-other-token"); strings.Contains(other, "http_5xx") || strings.Contains(other, "dead_letter") {
		t.Errorf("another tenant's page shows acme's data:\n%s", other)
	}

	// What the control plane holds: opaque ids, no provider or event type,
	// and nothing of the forward target's answer.
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, cpDB)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT tenant, job, coalesce(provider, ''), coalesce(event_type, '') FROM control_plane.attempts`)
	if err != nil {
		t.Fatal(err)
	}
	hex64 := regexp.MustCompile(`^[0-9a-f]{64}$`)
	count := 0
	for rows.Next() {
		var tenant, job, provider, eventType string
		if err := rows.Scan(&tenant, &job, &provider, &eventType); err != nil {
			t.Fatal(err)
		}
		count++
		if tenant != "acme" || !hex64.MatchString(job) || provider != "" || eventType != "" {
			t.Errorf("stored record: tenant %q job %q provider %q event type %q", tenant, job, provider, eventType)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if count != 2*n {
		t.Errorf("control plane holds %d records, want %d", count, 2*n)
	}
	for _, p := range []*proc{dev, cp} {
		if err := p.stop(); err != nil {
			t.Errorf("exit after SIGTERM: %v\n%s", err, p.errOut())
		}
	}
}
