package tests

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/internal/pgtest"
)

// The operator commands end to end: inlet ingress (with its admin API)
// stores a webhook, inlet events lists it, shows its exact bytes and
// re-verifies it, inlet dlq finds its dead letter and inlet replay re-queues
// it; the error paths exit non-zero with one line.
func TestAdminCommandsEndToEnd(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `INSERT INTO webhook_ingress.subscriptions (handler, provider_pattern, max_attempts) VALUES ('billing', 'stripe', 3)`); err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	addr, adminAddr := freeAddr(t), freeAddr(t)
	const token = "e2e-admin-token-0123456789"
	cfg := writeFile(t, dir, "inlet.yaml", `
database_url: ${DATABASE_URL}
ingress:
  listen: "`+addr+`"
  metrics_listen: "127.0.0.1:0"
admin:
  listen: "`+adminAddr+`"
  token: "${ADMIN_TOKEN}"
sources:
  - {name: stripe, type: stripe, secrets: ["whsec_e2e_admin"]}
`)
	env := cleanEnv("DATABASE_URL="+url, "ADMIN_TOKEN="+token)
	p := start(t, env, "ingress", "--config", cfg)
	p.waitLog("ingress listening", 30*time.Second)
	p.waitLog("admin API listening", 10*time.Second)

	// Odd but valid JSON: the bytes must come back exactly as sent.
	body := "{\"id\":\"evt_e2e_admin\",  \"type\":\"invoice.paid\",\n\t\"note\":\"grüße \\u00e9\" }  "
	bodyFile := filepath.Join(dir, "body.json")
	if err := os.WriteFile(bodyFile, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := runInlet(t, env, "send", "stripe", "--config", cfg, "--url", "http://"+addr, "--body-file", bodyFile)
	if code != 0 || !strings.Contains(out, `"stored"`) {
		t.Fatalf("send: exit %d\n%s%s", code, out, errOut)
	}

	inlet := func(args ...string) (string, string, int) {
		t.Helper()
		return runInlet(t, env, append(args, "--config", cfg)...)
	}

	// events list --json
	out, errOut, code = inlet("events", "list", "--source", "stripe", "--type", "invoice.*", "--since", "1h", "--json")
	if code != 0 {
		t.Fatalf("events list: exit %d\n%s", code, errOut)
	}
	// Every --json list is {"items": [...], "next": "..."}, next absent on
	// the last page.
	type eventPage struct {
		Events []struct {
			ID              int64  `json:"id"`
			ExternalEventID string `json:"external_event_id"`
			BodySize        int    `json:"body_size"`
			Jobs            []struct{ Handler, Status string }
		} `json:"items"`
		Next *string `json:"next"`
	}
	var page eventPage
	if err := json.Unmarshal([]byte(out), &page); err != nil || len(page.Events) != 1 || page.Next != nil {
		t.Fatalf("events list --json: %v\n%s", err, out)
	}
	ev := page.Events[0]
	if ev.ExternalEventID != "evt_e2e_admin" || ev.BodySize != len(body) || len(ev.Jobs) != 1 || ev.Jobs[0].Handler != "billing" {
		t.Fatalf("listed event = %+v", ev)
	}
	id := strconv.FormatInt(ev.ID, 10)
	out, _, code = inlet("events", "list")
	if code != 0 || !strings.Contains(out, "evt_e2e_admin") || !strings.Contains(out, "billing:pending") {
		t.Fatalf("events list table: exit %d\n%s", code, out)
	}

	// events show --raw: the stored bytes, nothing else.
	out, errOut, code = inlet("events", "show", id, "--raw")
	if code != 0 || out != body {
		t.Fatalf("events show --raw: exit %d, %q, want %q\n%s", code, out, body, errOut)
	}
	out, _, code = inlet("events", "show", id)
	if code != 0 || !strings.Contains(out, "Stripe-Signature:") || !strings.Contains(out, body) || !strings.Contains(out, "handler billing") {
		t.Fatalf("events show: exit %d\n%s", code, out)
	}

	// events verify: it verifies; the owner alters it with the trigger off; it does not.
	if out, errOut, code = inlet("events", "verify", id); code != 0 || !strings.Contains(out, "1 verified, 0 failed") {
		t.Fatalf("events verify: exit %d\n%s%s", code, out, errOut)
	}
	for _, sql := range []string{
		`ALTER TABLE webhook_ingress.events DISABLE TRIGGER events_append_only_row`,
		`UPDATE webhook_ingress.events SET raw_body = convert_to(replace(convert_from(raw_body, 'UTF8'), 'invoice.paid', 'invoice.void'), 'UTF8') WHERE id = ` + id,
		`ALTER TABLE webhook_ingress.events ENABLE ALWAYS TRIGGER events_append_only_row`,
	} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	out, errOut, code = inlet("events", "verify", "--since", "1h")
	if code != 1 || !strings.Contains(out, "signature_mismatch") || strings.Count(strings.TrimSpace(errOut), "\n") != 0 ||
		!strings.Contains(errOut, "1 of 1 event no longer verify") {
		t.Fatalf("events verify after tampering: exit %d\n%s\nstderr %q", code, out, errOut)
	}

	// The billing job dead-letters, as a consumer would leave it.
	var jobID int64
	if err := conn.QueryRow(ctx, `UPDATE webhook_ingress.jobs SET status = 'dead_letter', attempt_count = 3,
		last_error = 'billing API said 500', last_error_class = 'http_5xx', updated_at = now()
		WHERE event_id = $1 AND handler = 'billing' RETURNING id`, ev.ID).Scan(&jobID); err != nil {
		t.Fatal(err)
	}
	job := strconv.FormatInt(jobID, 10)
	out, _, code = inlet("dlq", "list", "--handler", "billing", "--json")
	if code != 0 || !strings.Contains(out, `"job_id": `+job) || !strings.Contains(out, `"last_error_class": "http_5xx"`) {
		t.Fatalf("dlq list --json: exit %d\n%s", code, out)
	}
	if out, _, code = inlet("dlq", "show", job); code != 0 || !strings.Contains(out, "billing API said 500") {
		t.Fatalf("dlq show: exit %d\n%s", code, out)
	}

	status := func() string {
		var s string
		if err := conn.QueryRow(ctx, `SELECT status FROM webhook_ingress.jobs WHERE id = $1`, jobID).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	out, _, code = inlet("replay", "--job", job, "--dry-run")
	if code != 0 || !strings.Contains(out, "would touch 1 job: re-queue 1, create 0") || status() != "dead_letter" {
		t.Fatalf("replay --dry-run: exit %d, job %s\n%s", code, status(), out)
	}
	out, errOut, code = inlet("replay", "--handler", "billing", "--dead-letters")
	if code != 0 || !strings.Contains(out, "re-queued 1") || status() != "pending" {
		t.Fatalf("replay: exit %d, job %s\n%s%s", code, status(), out, errOut)
	}
	// No longer a dead letter: dlq show says so and what it is.
	out, errOut, code = inlet("dlq", "show", job)
	if want := "inlet: job " + job + " is not a dead letter: it is pending (inlet events show " + id + " shows it)\n"; code != 1 || out != "" || errOut != want {
		t.Fatalf("dlq show of a re-queued job: exit %d, stdout %q, stderr %q; want exit 1 and %q", code, out, errOut, want)
	}
	// Its history numbers the runs: the replay starts run 2 (the
	// dead-lettering above left no attempt rows, but the marker says 3).
	out, _, code = inlet("events", "show", id)
	if code != 0 || !strings.Contains(out, "attempts 0/3 (run 2)") || !strings.Contains(out, "RUN  #  OUTCOME") ||
		!strings.Contains(out, "replay: run 2 starts at attempt 1 (run 1 ended after 3 attempts)") {
		t.Fatalf("events show after the replay: exit %d\n%s", code, out)
	}

	// The admin API of the ingress process, on its own listener.
	get := func(path, auth string) (int, string) {
		req, _ := http.NewRequest("GET", "http://"+adminAddr+path, nil)
		if auth != "" {
			req.Header.Set("Authorization", "Bearer "+auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if c, b := get("/api/events/"+id+"/raw", token); c != 200 || !strings.Contains(b, "invoice.void") {
		t.Fatalf("admin API raw: %d %q", c, b)
	}
	if c, _ := get("/api/events", ""); c != 401 {
		t.Fatalf("admin API without a token: %d", c)
	}
	if c, _ := get("/api/events", "not-the-token-at-all"); c != 401 {
		t.Fatalf("admin API with a wrong token: %d", c)
	}
	// Never on the webhook port.
	resp, err := http.Get("http://" + addr + "/api/events")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode == 200 || resp.StatusCode == 401 {
		t.Fatalf("webhook port answered /api/events with %d", resp.StatusCode)
	}

	// Error paths: one line, non-zero.
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"events", "show", "999999"}, 1, "show event 999999: no such event"},
		{[]string{"replay", "--job", "999999"}, 1, "replay job 999999: no such job"},
		{[]string{"replay", "--handler", "ghost", "--dead-letters"}, 1, `handler "ghost": no such handler`},
		{[]string{"events", "list", "--since", "last tuesday"}, 2, "--since"},
		{[]string{"replay", "--handler", "billing"}, 2, "needs a filter"},
	} {
		_, errOut, code := inlet(c.args...)
		if code != c.code || !strings.Contains(errOut, c.want) || strings.Count(strings.TrimSpace(errOut), "\n") != 0 {
			t.Errorf("inlet %s: exit %d, stderr %q; want exit %d and one line with %q", strings.Join(c.args, " "), code, errOut, c.code, c.want)
		}
	}

	// A second event: a page of one has the next page's --before in next.
	if out, errOut, code = runInlet(t, env, "send", "stripe", "--config", cfg, "--url", "http://"+addr); code != 0 {
		t.Fatalf("send: exit %d\n%s%s", code, out, errOut)
	}
	out, _, code = inlet("events", "list", "--limit", "1", "--json")
	page = eventPage{}
	if err := json.Unmarshal([]byte(out), &page); code != 0 || err != nil || len(page.Events) != 1 || page.Next == nil ||
		!strings.HasPrefix(*page.Next, strconv.FormatInt(page.Events[0].ID, 10)+"@") { // id@time@snapshot: one snapshot for all pages
		t.Fatalf("events list --limit 1 --json: exit %d (%v)\n%s", code, err, out)
	}
	out, _, code = inlet("events", "list", "--limit", "1", "--json", "--before", *page.Next)
	page = eventPage{}
	if err := json.Unmarshal([]byte(out), &page); code != 0 || err != nil || len(page.Events) != 1 || page.Events[0].ID != ev.ID {
		t.Fatalf("events list --before next: exit %d (%v)\n%s", code, err, out)
	}
	out, _, code = inlet("dlq", "list", "--json")
	if code != 0 || strings.TrimSpace(out) != `{
  "items": []
}` {
		t.Fatalf("dlq list --json with no dead letter: exit %d\n%s", code, out)
	}

	// subscriptions: the list is an object like the others; disable takes
	// the handler as its argument, enable as --handler.
	out, _, code = inlet("subscriptions", "list", "--json")
	var subs struct {
		Items []struct {
			Handler string `json:"handler"`
			Enabled bool   `json:"enabled"`
		} `json:"items"`
	}
	if err := json.Unmarshal([]byte(out), &subs); code != 0 || err != nil || len(subs.Items) != 1 || subs.Items[0].Handler != "billing" {
		t.Fatalf("subscriptions list --json: exit %d (%v)\n%s", code, err, out)
	}
	// A handler's limits and circuit, as its consumer registered them.
	if _, err := conn.Exec(ctx, `INSERT INTO webhook_ingress.handler_limits
		(handler, rate_per_second, burst, max_in_flight, breaker_failures, breaker_probe_interval, consecutive_failures, circuit, next_probe_at)
		VALUES ('billing', 20, 20, 5, 3, '30s', 3, 'open', '2030-01-02T03:04:05Z')`); err != nil {
		t.Fatal(err)
	}
	out, _, code = inlet("subscriptions", "list")
	if code != 0 || !strings.Contains(out, "20/s burst 20, 5 in flight") || !strings.Contains(out, "open (3/3 failures), next probe 2030-01-02T03:04:05Z") {
		t.Fatalf("subscriptions list with limits: exit %d\n%s", code, out)
	}
	out, _, code = inlet("subscriptions", "list", "--json")
	if code != 0 || !strings.Contains(out, `"circuit": "open"`) || !strings.Contains(out, `"rate_limit": 20`) || !strings.Contains(out, `"breaker_probe_interval": "30s"`) {
		t.Fatalf("subscriptions list --json with limits: exit %d\n%s", code, out)
	}
	if out, errOut, code = inlet("subscriptions", "disable", "billing"); code != 0 || !strings.Contains(out, "disabled 1 subscription(s) of billing") {
		t.Fatalf("subscriptions disable billing: exit %d\n%s%s", code, out, errOut)
	}
	if out, errOut, code = inlet("subscriptions", "enable", "--handler", "billing"); code != 0 || !strings.Contains(out, "enabled 1 subscription(s) of billing") {
		t.Fatalf("subscriptions enable --handler billing: exit %d\n%s%s", code, out, errOut)
	}

	if err := p.stop(); err != nil {
		t.Fatalf("ingress after SIGTERM: %v", err)
	}
}

func TestAdminCommandsHelp(t *testing.T) {
	t.Parallel()
	env := cleanEnv()
	out, _, code := runInlet(t, env, "--help")
	for _, c := range []string{"events", "dlq", "replay"} {
		if code != 0 || !strings.Contains(out, "  "+c+" ") {
			t.Errorf("inlet --help does not list %s:\n%s", c, out)
		}
	}
	for _, args := range [][]string{{"events"}, {"events", "list"}, {"events", "show"}, {"events", "verify"},
		{"dlq"}, {"dlq", "list"}, {"dlq", "show"}, {"replay"}} {
		out, _, code := runInlet(t, env, append(args, "--help")...)
		if code != 0 || !strings.Contains(out, "Usage: inlet "+strings.Join(args, " ")) || !strings.Contains(out, "-config") {
			t.Errorf("inlet %s --help: exit %d\n%s", strings.Join(args, " "), code, out)
		}
	}
	_, errOut, code := runInlet(t, env, "dlq")
	if code != 2 || errOut != "inlet: dlq needs a command: list, show; see 'inlet dlq --help'\n" {
		t.Errorf("inlet dlq: exit %d, stderr %q", code, errOut)
	}
}
