package tests

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/internal/pgtest"
	"github.com/inlet-dev/inlet/internal/testwait"
)

func TestHelpAndUsageErrors(t *testing.T) {
	t.Parallel()
	env := cleanEnv()
	out, _, code := runInlet(t, env, "--help")
	if code != 0 {
		t.Fatalf("--help exit %d", code)
	}
	for _, c := range []string{"dev", "ingress", "streamer", "consumer", "migrate", "send", "events", "dlq", "replay", "subscriptions", "backfill", "reconcile", "audit", "retention", "relay", "control-plane", "config"} {
		if !strings.Contains(out, "  "+c+" ") {
			t.Errorf("--help does not list %s:\n%s", c, out)
		}
		cout, _, code := runInlet(t, env, c, "--help")
		if code != 0 || !strings.Contains(cout, "Usage: inlet "+c) || !strings.Contains(cout, "-config") {
			t.Errorf("%s --help: exit %d\n%s", c, code, cout)
		}
	}
	_, errOut, code := runInlet(t, env, "frobnicate")
	if code != 2 || strings.Count(strings.TrimSpace(errOut), "\n") != 0 || !strings.Contains(errOut, "unknown command") {
		t.Fatalf("unknown command: exit %d, stderr %q", code, errOut)
	}
	// A usage error is one line on stderr, pointing to the command's --help,
	// and nothing on stdout: not the help, not the error twice.
	for _, c := range []struct {
		args       []string
		want, help string
	}{
		{nil, "inlet: no command given", "inlet"},
		{[]string{"frobnicate"}, `inlet: unknown command "frobnicate"`, "inlet"},
		{[]string{"events", "list", "--bogus"}, "inlet: flag provided but not defined: -bogus", "inlet events list"},
		{[]string{"events"}, "inlet: events needs a command: list, show, types, verify", "inlet events"},
		{[]string{"dlq", "show", "x"}, `inlet: JOB_ID "x": must be a positive integer`, "inlet dlq show"},
		{[]string{"send"}, "inlet: inlet send takes one SOURCE, got 0 arguments", "inlet send"},
		{[]string{"ingress", "--listen"}, "inlet: flag needs an argument: -listen", "inlet ingress"},
	} {
		out, errOut, code := runInlet(t, env, c.args...)
		want := c.want + "; see '" + c.help + " --help'\n"
		if code != 2 || out != "" || errOut != want {
			t.Errorf("inlet %s: exit %d, stdout %q, stderr %q; want exit 2, no stdout, stderr %q", strings.Join(c.args, " "), code, out, errOut, want)
		}
	}
}

func TestBadConfigFailsAtStartNamingTheField(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := writeFile(t, dir, "inlet.yaml", "database_url: postgres://127.0.0.1:1/x\nsources:\n  - name: stripe\n    type: stripe\n    secrets: [\"${INLET_TEST_UNSET_SECRET:-}\"]\n")
	_, errOut, code := runInlet(t, cleanEnv(), "ingress", "--config", cfg)
	if code != 1 || !strings.Contains(errOut, "sources[0].secrets[0]") || strings.Count(strings.TrimSpace(errOut), "\n") != 0 {
		t.Fatalf("exit %d, stderr %q: want exit 1 and one line naming sources[0].secrets[0]", code, errOut)
	}
	cfg = writeFile(t, dir, "bad-acme.yaml", "sources:\n  - name: acme\n    type: standard-webhooks\n    secrets: [\"whsec_!!!notbase64\"]\n")
	_, errOut, code = runInlet(t, cleanEnv("DATABASE_URL=postgres://127.0.0.1:1/x"), "ingress", "--config", cfg)
	// The scheme's own check (a secret's format) is the config check's too:
	// file, line and key path, like every other problem, never the secret.
	if code != 1 || !strings.Contains(errOut, cfg+`:4: sources[0].secrets[0]: not valid base64`) || strings.Contains(errOut, "notbase64") {
		t.Fatalf("exit %d, stderr %q: want the file, line and field named and the secret not echoed", code, errOut)
	}
	_, errOut, code = runInlet(t, cleanEnv(), "ingress", "--config", filepath.Join(dir, "missing.yaml"))
	if code != 1 || !strings.Contains(errOut, "does not exist") {
		t.Fatalf("missing file: exit %d, stderr %q", code, errOut)
	}
}

// inlet config check, as CI runs it: one ok line naming the file and exit 0,
// or every problem, one a line as FILE:LINE: key.path: message, and exit 1.
func TestConfigCheck(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	example, err := filepath.Abs("../inlet.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	out, errOut, code := runInlet(t, cleanEnv(), "config", "check", "--config", example, "--allow-unset")
	if code != 0 || out != example+": ok\n" || errOut != "" {
		t.Fatalf("example, --allow-unset: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	// Without --allow-unset every ${VAR} must be set.
	out, _, code = runInlet(t, cleanEnv(), "config", "check", "--config", example)
	if code != 1 || strings.Count(out, "\n") != 4 || !regexp.MustCompile(`(?m)^`+regexp.QuoteMeta(example)+`:\d+: database_url: environment variable DATABASE_URL is not set`).MatchString(out) {
		t.Fatalf("example, variables unset: exit %d, stdout %q", code, out)
	}

	bad := writeFile(t, dir, "bad.yaml", `# a file with a problem in each of three sections
streamer:

  poll_interval: 1sec
sourcs: []
ingress:
  listen: ":8080"
admin:
  listen: ":8080"
  token: 0123456789abcdef
`)
	out, errOut, code = runInlet(t, cleanEnv(), "config", "check", "--config", bad)
	want := bad + `:4: streamer.poll_interval: "1sec" is not a duration (write it like 500ms, 10s, 5m or 1h)
` + bad + ":5: sourcs: unknown key; did you mean `sources`?\n" +
		bad + `:9: admin.listen: ":8080" is the webhook listener (ingress.listen ":8080"); the admin API needs a listener of its own
`
	if code != 1 || out != want || strings.TrimSpace(errOut) != "inlet: "+bad+": 3 problems" {
		t.Fatalf("bad file: exit %d\nstdout:\n%s\nwant:\n%s\nstderr: %q", code, out, want, errOut)
	}
	// A service refuses the same file with the same lines, whichever
	// sections it reads itself.
	_, errOut, code = runInlet(t, cleanEnv("DATABASE_URL=postgres://127.0.0.1:1/x"), "consumer", "--config", bad)
	if code != 1 || !strings.Contains(errOut, "inlet: "+bad+":4: streamer.poll_interval") || !strings.Contains(errOut, "inlet: "+bad+":9: admin.listen") {
		t.Fatalf("inlet consumer: exit %d, stderr %q", code, errOut)
	}
	_, errOut, code = runInlet(t, cleanEnv(), "config", "check", "--config", filepath.Join(dir, "missing.yaml"))
	if code != 1 || !strings.Contains(errOut, "does not exist") {
		t.Fatalf("missing file: exit %d, stderr %q", code, errOut)
	}
}

func TestMigrateTwiceIsANoOp(t *testing.T) {
	t.Parallel()
	url := pgtest.NewEmptyDatabase(t)
	out, errOut, code := runInlet(t, cleanEnv("DATABASE_URL="+url), "migrate")
	if code != 0 || !strings.Contains(out, "applied 001_initial") || !strings.Contains(out, "applied 005_partitions") {
		t.Fatalf("first migrate: exit %d\n%s\n%s", code, out, errOut)
	}
	out, errOut, code = runInlet(t, cleanEnv(), "migrate", "--database-url", url)
	if code != 0 || !strings.Contains(out, "is current") || strings.Contains(out, "applied") || strings.Contains(out, "created") {
		t.Fatalf("second migrate: exit %d\n%s\n%s", code, out, errOut)
	}
}

// The first README command: inlet dev on embedded defaults, with no database
// configured, starts its own PostgreSQL, and the printed example is stored.
func TestDevOnEmbeddedDefaults(t *testing.T) {
	t.Parallel()
	data := pgtest.TempDir(t)
	addr, metricsAddr, adminAddr := freeAddr(t), freeAddr(t), freeAddr(t)
	env := cleanEnv("INLET_METRICS_LISTEN="+metricsAddr, "INLET_ADMIN_LISTEN="+adminAddr)
	p := start(t, env, "dev", "--data-dir", data, "--listen", addr)
	p.waitOutput("Ctrl-C stops.", 3*time.Minute)
	if !strings.Contains(p.out(), "inlet send stripe") || !strings.Contains(p.out(), "X-Hub-Signature-256: sha256=") {
		t.Fatalf("walkthrough lacks the example commands:\n%s", p.out())
	}
	base := "http://" + addr
	for _, src := range []string{"stripe", "github", "acme"} {
		out, errOut, code := runInlet(t, env, "send", src, "--url", base)
		if code != 0 || !strings.Contains(out, `"stored"`) {
			t.Fatalf("send %s: exit %d\n%s%s", src, code, out, errOut)
		}
	}
	out, _, code := runInlet(t, env, "send", "github", "--url", base, "--id", "dup-1")
	out2, _, code2 := runInlet(t, env, "send", "github", "--url", base, "--id", "dup-1")
	if code != 0 || code2 != 0 || !strings.Contains(out, `"stored"`) || !strings.Contains(out2, `"duplicate"`) {
		t.Fatalf("duplicate: %q then %q", out, out2)
	}

	urlBytes, err := os.ReadFile(filepath.Join(data, "database_url"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, strings.TrimSpace(string(urlBytes)))
	if err != nil {
		t.Fatal(err)
	}
	var n int
	err = conn.QueryRow(ctx, `SELECT count(*) FROM webhook_ingress.events WHERE signature_verified`).Scan(&n)
	conn.Close(ctx)
	if err != nil || n != 4 {
		t.Fatalf("%d verified events stored (%v), want 4", n, err)
	}

	// The same on /metrics, once the log handler has run all four jobs.
	want := []string{
		`inlet_ingress_stored_total{source="github"} 2`,
		`inlet_ingress_stored_total{source="stripe"} 1`,
		`inlet_ingress_duplicates_total{source="github"} 1`,
		`inlet_consumer_attempts_total{handler="log",outcome="completed"} 4`,
		`inlet_jobs{handler="log",state="pending"} 0`,
		`inlet_source_last_event_timestamp_seconds{source="acme"}`,
		`inlet_streamer_wakeups_total{cause="notify"}`,
	}
	testwait.Eventually(t, 30*time.Second, "/metrics of inlet dev showing the four jobs", func() (bool, string) {
		page := httpGet(t, "http://"+metricsAddr+"/metrics")
		for _, w := range want {
			if !strings.Contains(page, w) {
				return false, "no " + w + " in:\n" + page
			}
		}
		return true, ""
	})
	if login := httpGet(t, "http://"+adminAddr+"/dashboard/login"); !strings.Contains(login, `name="token"`) ||
		!strings.Contains(p.out(), "/dashboard/ (token: inlet-dev-admin-token)") {
		t.Fatalf("the dashboard of inlet dev: login page %q, walkthrough:\n%s", login, p.out())
	}
	if err := p.stop(); err != nil {
		t.Fatalf("inlet dev after SIGTERM: %v\n%s", err, p.errOut())
	}
	// Its PostgreSQL stopped with it.
	if _, err := os.Stat(filepath.Join(data, "pg", "data", "postmaster.pid")); !os.IsNotExist(err) {
		t.Fatalf("postmaster.pid still there after inlet dev exited: %v", err)
	}
}

// inlet ingress as its own service: stores, then drains on SIGTERM and exits 0.
func TestIngressServiceDrainsOnSIGTERM(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t)
	dir := t.TempDir()
	addr := freeAddr(t)
	cfg := writeFile(t, dir, "inlet.yaml", `
database_url: ${DATABASE_URL}
ingress:
  listen: "`+addr+`"
  metrics_listen: "127.0.0.1:0"
sources:
  - name: github
    type: github
    secrets: ["${GH_SECRET}"]
`)
	env := cleanEnv("DATABASE_URL="+url, "GH_SECRET=e2e-github-secret")
	p := start(t, env, "ingress", "--config", cfg)
	p.waitLog("ingress listening", 30*time.Second)
	out, errOut, code := runInlet(t, env, "send", "github", "--config", cfg, "--url", "http://"+addr)
	if code != 0 || !strings.Contains(out, `"stored"`) {
		t.Fatalf("send: exit %d\n%s%s", code, out, errOut)
	}
	if err := p.stop(); err != nil {
		t.Fatalf("exit after SIGTERM: %v", err)
	}
	if !strings.Contains(p.errOut(), "ingress stopped") {
		t.Fatalf("no drain log:\n%s", p.errOut())
	}
}

// Every signature scheme and provider preset, end to end through the
// binary: inlet send signs as the provider would, inlet ingress verifies and
// stores; and so does the ready curl of inlet send --curl.
func TestSendEveryScheme(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t)
	addr := freeAddr(t)
	presets, presetNames, keys := presetSources(t)
	cfg := writeFile(t, t.TempDir(), "inlet.yaml", `
database_url: ${DATABASE_URL}
ingress:
  listen: "`+addr+`"
  metrics_listen: "127.0.0.1:0"
sources:
  - {name: stripe, type: stripe, secrets: ["whsec_e2e"]}
  - {name: github, type: github, secrets: ["gh-e2e"]}
  - {name: gitlab, type: gitlab, secrets: ["gl-e2e"]}
  - {name: shopify, type: shopify, secrets: ["shop-e2e"]}
  - {name: slack, type: slack, secrets: ["slack-e2e"]}
  - {name: paddle, type: paddle, secrets: ["pdl_ntfset_e2e"]}
  - {name: acme, type: standard-webhooks, secrets: ["whsec_aW5sZXQtZTJlLXN0YW5kYXJkLXdlYmhvb2tzLWtleQ=="]}
  - {name: twilio, type: twilio, secrets: ["twilio-e2e"]}
  - name: vendor
    type: hmac
    secrets: ["vendor-e2e"]
    hmac: {header: X-Vendor-Signature, algorithm: sha512, encoding: base64, prefix: "v1=", timestamp_header: X-Vendor-Timestamp}
`+presets)
	env := cleanEnv("DATABASE_URL=" + url)
	p := start(t, env, "ingress", "--config", cfg)
	p.waitLog("ingress listening", 30*time.Second)
	all := append([]string{"stripe", "github", "gitlab", "shopify", "slack", "paddle", "acme", "twilio", "vendor"}, presetNames...)
	for _, src := range all {
		out, errOut, code := runInlet(t, env, append([]string{"send", src, "--config", cfg, "--url", "http://" + addr}, keyArgs(keys, src)...)...)
		if code != 0 || !strings.Contains(out, `"stored"`) && !strings.Contains(out, `{"type":5}`) {
			t.Errorf("send %s: exit %d\n%s%s", src, code, out, errOut)
		}
		// The same as a ready curl (but GitLab's, Okta's and Graph's, whose
		// request carries the secret itself: not printed).
		out, errOut, code = runInlet(t, env, append([]string{"send", src, "--config", cfg, "--url", "http://" + addr, "--curl"}, keyArgs(keys, src)...)...)
		if src == "gitlab" || src == "okta" || src == "microsoft-graph" {
			if code != 1 || !strings.Contains(errOut, "carries the secret itself") || strings.Contains(out+errOut, "gl-e2e") || strings.Contains(out+errOut, "whsec_") {
				t.Errorf("send gitlab --curl: exit %d\n%s%s", code, out, errOut)
			}
			continue
		}
		if code != 0 {
			t.Errorf("send %s --curl: exit %d\n%s%s", src, code, out, errOut)
			continue
		}
		if status, answer := do(t, curlRequest(t, out)); status != http.StatusOK || !strings.Contains(answer, `"stored"`) && !strings.Contains(answer, `{"type":5}`) {
			t.Errorf("the curl of %s: %d %s\n%s", src, status, answer, out)
		}
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(DISTINCT provider) FROM webhook_ingress.events WHERE signature_verified`).Scan(&n); err != nil || n != len(all) {
		t.Fatalf("%d sources stored verified events (%v), want %d", n, err, len(all))
	}

	// With --body, the event id printed is the one stored: Stripe's from the
	// body, a hash of the body for a source that names no id, the --id
	// header for GitHub.
	printed := regexp.MustCompile(`\(event id ([^)]*)\)`)
	for _, c := range []struct{ src, body, want string }{
		{"stripe", `{"id":"evt_from_the_body","object":"event","type":"invoice.paid","data":{"object":{}}}`, "evt_from_the_body"},
		{"vendor", `{"order":42}`, "sha256:"},
		{"github", `{"zen":"hello"}`, "delivery-from-flag"},
	} {
		out, errOut, code := runInlet(t, env, "send", c.src, "--config", cfg, "--url", "http://"+addr, "--body", c.body, "--id", "delivery-from-flag")
		m := printed.FindStringSubmatch(out)
		if code != 0 || m == nil {
			t.Fatalf("send %s --body: exit %d\n%s%s", c.src, code, out, errOut)
		}
		var stored string
		if err := conn.QueryRow(ctx, `SELECT external_event_id FROM webhook_ingress.events WHERE provider = $1 AND raw_body = $2`,
			c.src, []byte(c.body)).Scan(&stored); err != nil {
			t.Fatalf("the event sent to %s: %v", c.src, err)
		}
		if m[1] != stored || !strings.HasPrefix(stored, c.want) {
			t.Errorf("send %s --body printed event id %q, stored %q (want %s…)", c.src, m[1], stored, c.want)
		}
	}
}

// inlet backfill against an API nobody answers: each wait says why
// (connection refused, not "provider error"), and stopped before its first
// page it names no cursor file, for it wrote none.
func TestBackfillUnreachableAPISaysWhy(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t)
	env := cleanEnv("DATABASE_URL=" + url)
	p := start(t, env, "backfill", "stripe", "--api-key", "sk_test_e2e", "--base-url", "http://127.0.0.1:1")
	p.waitLog("waiting", time.Minute)
	if log := p.errOut(); !strings.Contains(log, "backfill stripe: request failed (GET /v1/events: dial tcp 127.0.0.1:1: connect: connection refused), waiting") {
		t.Fatalf("the wait line does not give the cause:\n%s", log)
	}
	if err := p.stop(); err == nil {
		t.Fatal("interrupted backfill exited 0")
	}
	log := p.errOut()
	if strings.Contains(log, "resume from the cursor") || strings.Contains(log, ".inlet/backfill-") || !strings.Contains(log, "no cursor saved") {
		t.Fatalf("stopped before a page, it names a cursor file or does not say none was saved:\n%s", log)
	}
	if _, err := os.Stat(filepath.Join(p.cmd.Dir, ".inlet", "backfill-stripe.json")); !os.IsNotExist(err) {
		t.Fatalf("cursor file: %v", err)
	}
}
