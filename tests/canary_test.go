package tests

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"

	"github.com/inlet-dev/inlet/ingress/verify"
	"github.com/inlet-dev/inlet/internal/natstest"
	"github.com/inlet-dev/inlet/internal/pgtest"
	"github.com/inlet-dev/inlet/internal/testwait"
)

// canaries are unique strings put in webhook bodies and header values; none
// may appear anywhere outside Postgres (and the internal service the
// forwarding handler delivers to, which is inside the boundary by design).
type canaries struct{ list []string }

func (c *canaries) next(kind string) string {
	s := fmt.Sprintf("CANARY-%s-%d-%x", kind, len(c.list), time.Now().UnixNano()&0xffffff)
	c.list = append(c.list, s)
	return s
}

// find returns every canary in text, with where it was found.
func (c *canaries) find(where, text string) []string {
	var hits []string
	for _, s := range c.list {
		if strings.Contains(text, s) {
			hits = append(hits, where+": "+s)
		}
	}
	// A canary cut short (a truncated log line) still starts with the prefix.
	if m := regexp.MustCompile(`CANARY-[a-z]+-\d+`).FindAllString(text, -1); len(m) > 0 && len(hits) == 0 {
		hits = append(hits, where+": a canary prefix "+m[0])
	}
	return hits
}

// wireTap records every message published on a NATS server: JetStream
// traffic, stream contents and the API included.
type wireTap struct {
	mu  sync.Mutex
	buf bytes.Buffer
	n   int
}

func tapNATS(t *testing.T, url string) *wireTap {
	t.Helper()
	nc, err := nats.Connect(url, nats.Name("canary-tap"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	tap := &wireTap{}
	if _, err := nc.Subscribe(">", func(m *nats.Msg) {
		tap.mu.Lock()
		defer tap.mu.Unlock()
		tap.n++
		fmt.Fprintf(&tap.buf, "%s %v %s\n", m.Subject, m.Header, m.Data)
	}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return tap
}

func (w *wireTap) String() (string, int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String(), w.n
}

// Webhooks whose bodies and headers carry canaries go through ingress,
// streamer, NATS and consumers — some handled, some failing into dead
// letters, some rejected at ingress — with metrics, tracing and the
// metadata reporter on. Then everything that left Postgres is searched:
// every message NATS carried, every log line of every service, every
// /metrics page, every span exported, the control plane's database, page
// and logs. No canary may be there; each must be
// in Postgres (so the search could have found them).
func TestCanariesNeverLeavePostgres(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	natsSrv := natstest.Start(t)
	tap := tapNATS(t, natsSrv.URL())
	// The database URLs carry passwords (the test cluster trusts every
	// login, so any password connects): no log may print them.
	const dbPassword, cpPassword = "canary-db-password", "canary-cp-db-password"
	dbURL, cpDB := withPassword(t, pgtest.NewDatabase(t), dbPassword), withPassword(t, pgtest.NewEmptyDatabase(t), cpPassword)
	col, colURL := newCollector(t)
	var c canaries

	// The control plane the reporter sends attempt metadata to.
	const tenantToken = "canary-control-plane-token"
	cpAddr := freeAddr(t)
	cpCfg := writeFile(t, t.TempDir(), "control-plane.yaml", fmt.Sprintf(`
control_plane:
  listen: %q
  database_url: ${CP_DATABASE_URL}
  tenants:
    - {name: acme, token: "${ACME_TOKEN}"}
`, cpAddr))
	cp := start(t, cleanEnv("CP_DATABASE_URL="+cpDB, "ACME_TOKEN="+tenantToken), "control-plane", "--config", cpCfg)
	cp.waitLog("control plane listening", 30*time.Second)

	// The internal service: fails every webhook whose body asks it to.
	internal := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var b bytes.Buffer
		_, _ = b.ReadFrom(r.Body)
		if strings.Contains(b.String(), `"fail":true`) {
			http.Error(w, "internal service refuses "+b.String(), http.StatusBadRequest)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer internal.Close()

	const ghSecret = "canary-github-secret"
	ingressAddr := freeAddr(t)
	ingressMetrics, streamerHealth, consumerHealth := freeAddr(t), freeAddr(t), freeAddr(t)
	cfg := writeFile(t, t.TempDir(), "inlet.yaml", fmt.Sprintf(`
database_url: ${DATABASE_URL}
ingress:
  listen: %q
  metrics_listen: %q
sources:
  - {name: github, type: github, secrets: [%q]}
bus: {kind: nats, url: %q}
streamer:
  health_listen: %q
  poll_interval: 200ms
  reap_interval: 200ms
consumer:
  health_listen: %q
  lease_extend: 1s
  handlers:
    - {name: forward, type: http-forward, url: %q, secret: "canary-forward-secret", max_attempts: 1, timeout: 5s}
    - {name: audit-log, type: log}
tracing:
  otlp_endpoint: %q
reporter:
  url: http://%s
  token: %q
  key: "canary-report-key"
  interval: 200ms
log:
  level: debug
`, ingressAddr, ingressMetrics, ghSecret, natsSrv.URL(), streamerHealth, consumerHealth, internal.URL, colURL, cpAddr, tenantToken))
	env := cleanEnv("DATABASE_URL=" + dbURL)
	cons := start(t, env, "consumer", "--config", cfg)
	cons.waitLog("consumers started", 30*time.Second)
	str := start(t, env, "streamer", "--config", cfg)
	str.waitLog("streamer started", 30*time.Second)
	ing := start(t, env, "ingress", "--config", cfg)
	ing.waitLog("ingress listening", 30*time.Second)
	procs := []*proc{ing, str, cons}

	// Handled, failing (dead letters), and rejected webhooks.
	send := func(delivery string, body []byte, sign bool, want int) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, "http://"+ingressAddr+"/webhooks/github", bytes.NewReader(body))
		if sign {
			for k, v := range verify.SignGitHub(ghSecret, delivery, "push", body) {
				req.Header[k] = v
			}
		} else {
			req.Header.Set("X-GitHub-Event", "push")
			req.Header.Set("X-GitHub-Delivery", delivery)
			req.Header.Set("X-Hub-Signature-256", "sha256="+strings.Repeat("0", 64))
		}
		kind := "stored"
		if !sign {
			kind = "rejected"
		}
		req.Header.Set("X-Canary-Header", c.next(kind+"header"))
		req.Header.Set("User-Agent", "GitHub-Hookshot/"+c.next(kind+"agent"))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Fatalf("delivery %s: %d, want %d", delivery, resp.StatusCode, want)
		}
	}
	const handled, failing, rejected = 5, 3, 2
	for i := range handled {
		send(fmt.Sprintf("canary-ok-%d", i), []byte(`{"zen":"`+c.next("body")+`"}`), true, 200)
	}
	for i := range failing {
		send(fmt.Sprintf("canary-fail-%d", i), []byte(`{"fail":true,"secret":"`+c.next("body")+`"}`), true, 200)
	}
	for i := range rejected {
		send(fmt.Sprintf("canary-bad-%d", i), []byte(`{"zen":"`+c.next("rejected")+`"}`), false, 401)
	}

	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	testwait.Eventually(t, 60*time.Second, fmt.Sprintf("%d completed and %d dead-lettered jobs", 2*handled+failing, failing), func() (bool, string) {
		var done, dead int
		if err := conn.QueryRow(ctx, `SELECT count(*) FILTER (WHERE status = 'completed'), count(*) FILTER (WHERE status = 'dead_letter')
			FROM webhook_ingress.jobs`).Scan(&done, &dead); err != nil {
			t.Fatal(err)
		}
		return done == 2*handled+failing && dead == failing, fmt.Sprintf("%d completed, %d dead-lettered", done, dead)
	})
	var stored string
	if err := conn.QueryRow(ctx, `SELECT string_agg(convert_from(raw_body, 'UTF8') || headers::text, ' ') FROM webhook_ingress.events`).Scan(&stored); err != nil {
		t.Fatal(err)
	}

	// The control plane: every row of every table of its database, and its page,
	// once every attempt has been reported.
	cpConn, err := pgx.Connect(ctx, cpDB)
	if err != nil {
		t.Fatal(err)
	}
	defer cpConn.Close(ctx)
	var cpDump string
	var reported int
	testwait.Eventually(t, 30*time.Second, fmt.Sprintf("the control plane holds %d attempts", 2*handled+2*failing), func() (bool, string) {
		if err := cpConn.QueryRow(ctx, `SELECT count(*) FROM control_plane.attempts`).Scan(&reported); err != nil {
			t.Fatal(err)
		}
		return reported >= 2*handled+2*failing, fmt.Sprintf("%d attempts", reported)
	})
	tables, err := cpConn.Query(ctx, `SELECT format('%I.%I', schemaname, tablename) FROM pg_tables WHERE schemaname NOT IN ('pg_catalog', 'information_schema')`)
	if err != nil {
		t.Fatal(err)
	}
	names, err := pgx.CollectRows(tables, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	for _, table := range names {
		var rows string
		if err := cpConn.QueryRow(ctx, `SELECT coalesce(string_agg(t::text, E'\n'), '') FROM `+table+` t`).Scan(&rows); err != nil {
			t.Fatal(err)
		}
		cpDump += table + "\n" + rows + "\n"
	}
	req, _ := http.NewRequest(http.MethodGet, "http://"+cpAddr+"/", nil)
	req.SetBasicAuth("acme", tenantToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var cpPage bytes.Buffer
	_, _ = cpPage.ReadFrom(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(cpPage.String(), "dead_letter") {
		t.Fatalf("control plane page: %d\n%s", resp.StatusCode, cpPage.String())
	}

	// What left Postgres: /metrics of every service ...
	var hits []string
	for name, addr := range map[string]string{"ingress": ingressMetrics, "streamer": streamerHealth, "consumer": consumerHealth} {
		page := httpGet(t, "http://"+addr+"/metrics")
		hits = append(hits, c.find(name+" /metrics", page)...)
		for _, secret := range []string{ghSecret, "canary-forward-secret"} {
			if strings.Contains(page, secret) {
				hits = append(hits, name+" /metrics: a secret")
			}
		}
	}
	// ... every log line and every span (flushed at shutdown) ...
	for _, p := range procs {
		if err := p.stop(); err != nil {
			t.Fatalf("stop: %v", err)
		}
	}
	for _, p := range procs {
		name := strings.Join(p.cmd.Args[1:2], "")
		hits = append(hits, c.find(name+" stdout", p.out())...)
		hits = append(hits, c.find(name+" stderr", p.errOut())...)
	}
	col.mu.Lock()
	spans, nSpans := col.raw.String(), len(col.spans)
	col.mu.Unlock()
	hits = append(hits, c.find("exported spans", spans)...)
	// ... the control plane's database, page and logs ...
	if err := cp.stop(); err != nil {
		t.Fatalf("stop the control plane: %v", err)
	}
	hits = append(hits, c.find("control plane database", cpDump)...)
	hits = append(hits, c.find("control plane page", cpPage.String())...)
	hits = append(hits, c.find("control plane logs", cp.out()+cp.errOut())...)
	// ... and every NATS message.
	wire, nMsgs := tap.String()
	hits = append(hits, c.find("NATS", wire)...)

	// Secrets are canaries too: the signing and forwarding secrets and the
	// database passwords.
	secrets := canaries{list: []string{ghSecret, "canary-forward-secret", dbPassword, cpPassword}}
	for _, p := range append(procs, cp) {
		hits = append(hits, secrets.find(p.cmd.Args[1]+" logs", p.out()+p.errOut())...)
	}
	hits = append(hits, secrets.find("NATS", wire)...)
	hits = append(hits, secrets.find("exported spans", spans)...)
	hits = append(hits, secrets.find("control plane database", cpDump+cpPage.String())...)
	if strings.Contains(cpDump, dbURL) || strings.Contains(cpDump, "webhook_ingress") {
		hits = append(hits, "control plane database: the customer's database URL or schema")
	}

	t.Logf("searched %d NATS messages (%d bytes), %d spans, the logs and /metrics of 3 services, and the control plane's %d reported attempts (%d bytes of rows) and page for %d canaries",
		nMsgs, len(wire), nSpans, reported, len(cpDump), len(c.list))
	if len(hits) > 0 {
		t.Fatalf("canaries outside Postgres:\n%s", strings.Join(hits, "\n"))
	}
	// The search can find them: the non-rejected ones are all in Postgres.
	for _, s := range c.list {
		if !strings.HasPrefix(s, "CANARY-rejected") && !strings.Contains(stored, s) {
			t.Errorf("canary %s is not in Postgres either: the search proves nothing", s)
		}
	}
	if nMsgs < handled+failing || nSpans == 0 {
		t.Fatalf("the tap saw %d NATS messages and %d spans: not the traffic it should have", nMsgs, nSpans)
	}
}

// withPassword is the database URL u with the login's password set to pw.
func withPassword(t *testing.T, u, pw string) string {
	t.Helper()
	p, err := url.Parse(u)
	if err != nil || p.User == nil {
		t.Fatalf("database URL %q: %v", u, err)
	}
	p.User = url.UserPassword(p.User.Username(), pw)
	return p.String()
}

// Every command, run with canary secrets in its environment — a database
// URL with a password, the sources' signing secrets, the admin token,
// provider API keys — and made to fail where a failure could echo one
// (unreachable or unparseable database URLs, an unreachable ingress):
// none may be printed or logged. inlet dev on the embedded defaults with
// the operator's own GitHub secret prints no ready signed request (GitHub
// signs no timestamp, so it would be valid forever) and no password.
// (ingress, streamer, consumer and control-plane run in
// TestCanariesNeverLeavePostgres, with passwords in their database URLs.)
func TestNoCommandPrintsASecret(t *testing.T) {
	t.Parallel()
	var c canaries
	password := c.next("password")
	ghSecret, stripeSecret := c.next("githubsecret"), "whsec_"+c.next("stripesecret")
	acmeKey := c.next("acmekey")
	acmeSecret := "whsec_" + base64.StdEncoding.EncodeToString([]byte(acmeKey))
	c.list = append(c.list, stripeSecret, acmeSecret, base64.StdEncoding.EncodeToString([]byte(acmeKey)))
	adminToken, apiKey, relaySecret := c.next("admintoken"), "sk_test_"+c.next("apikey"), c.next("relaysecret")
	// The signed curl the walkthrough used to print for one's own secret.
	leaked := verify.SignGitHub(ghSecret, "00000000-0000-0000-0000-000000000001", "ping", []byte(`{"zen":"Keep it logically awesome."}`))
	c.list = append(c.list, strings.TrimPrefix(leaked.Get("X-Hub-Signature-256"), "sha256="))

	dbURL := withPassword(t, pgtest.NewEmptyDatabase(t), password)
	addr, metricsAddr, adminAddr := freeAddr(t), freeAddr(t), freeAddr(t)
	env := cleanEnv("DATABASE_URL="+dbURL, "GITHUB_WEBHOOK_SECRET="+ghSecret, "STRIPE_WEBHOOK_SECRET="+stripeSecret,
		"ACME_WEBHOOK_SECRET="+acmeSecret, "INLET_ADMIN_TOKEN="+adminToken, "STRIPE_API_KEY="+apiKey, "GITHUB_TOKEN="+c.next("githubtoken"),
		"RELAY_SECRET="+relaySecret, "INLET_METRICS_LISTEN="+metricsAddr, "INLET_ADMIN_LISTEN="+adminAddr)
	var hits []string
	ran := 0
	check := func(what, out string) {
		t.Helper()
		ran++
		hits = append(hits, c.find(what, out)...)
	}
	// run runs a command to its end; wantOK: whether it should succeed.
	run := func(wantOK bool, args ...string) string {
		t.Helper()
		out, errOut, code := runInlet(t, env, args...)
		if (code == 0) != wantOK {
			t.Errorf("inlet %s: exit %d\n%s%s", strings.Join(args, " "), code, out, errOut)
		}
		check("inlet "+strings.Join(args, " "), out+errOut)
		return out
	}

	run(true, "migrate")
	dev := start(t, env, "dev", "--listen", addr)
	dev.waitOutput("Ctrl-C stops.", 2*time.Minute)
	base := "http://" + addr
	for _, src := range []string{"github", "stripe", "acme"} {
		if out := run(true, "send", src, "--url", base); !strings.Contains(out, `"stored"`) {
			t.Fatalf("send %s with the canary secret: %s", src, out)
		}
	}
	run(true, "events", "list")
	run(true, "events", "list", "--json")
	run(true, "events", "show", "1")
	run(true, "events", "verify", "--since", "1h")
	run(true, "dlq", "list")
	run(true, "replay", "--handler", "log", "--since", "1h", "--dry-run")
	run(true, "subscriptions", "list")
	run(true, "audit", "seal", "--grace", "1ms")
	run(true, "audit", "verify")
	run(true, "retention", "--dry-run")
	run(true, "roles", "create-consumer", "billing", "--handlers", "log", "--scope", "*")
	run(true, "roles", "list")

	// Backfill from a Stripe API that knows the key.
	stripeAPI := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+apiKey {
			http.Error(w, `{"error":{"message":"Invalid API Key provided"}}`, http.StatusUnauthorized)
			return
		}
		_, _ = w.Write([]byte(`{"object":"list","data":[],"has_more":false}`))
	}))
	defer stripeAPI.Close()
	run(true, "backfill", "stripe", "--base-url", stripeAPI.URL)
	run(false, "backfill", "stripe", "--base-url", stripeAPI.URL, "--api-key", "sk_test_"+c.next("wrongkey"), "--restart")

	// The relay: refusing a target URL with a password, then relaying.
	relayAddr := freeAddr(t)
	relayYAML := `
relay:
  listen: %q
  target: "http://%s"
  allow_insecure_target: true
  secrets: ["${RELAY_SECRET}"]
sources:
  - {name: github, type: github, secrets: ["${GITHUB_WEBHOOK_SECRET}"]}
`
	run(false, "relay", "--config", writeFile(t, t.TempDir(), "relay.yaml", fmt.Sprintf(relayYAML, relayAddr, "relay:"+password+"@"+addr)))
	relayCfg := writeFile(t, t.TempDir(), "relay.yaml", fmt.Sprintf(relayYAML, relayAddr, addr))
	relay := start(t, env, "relay", "--config", relayCfg)
	relay.waitLog("relay listening", 30*time.Second)
	if out := run(true, "send", "github", "--url", "http://"+relayAddr); !strings.Contains(out, `"stored"`) {
		t.Errorf("send through the relay: %s", out)
	}
	if err := relay.stop(); err != nil {
		t.Errorf("relay: %v", err)
	}
	check("inlet relay", relay.out()+relay.errOut())

	if err := dev.stop(); err != nil {
		t.Errorf("inlet dev: %v", err)
	}
	walk := dev.out()
	check("inlet dev", walk+dev.errOut())
	for _, want := range []string{"inlet send github", "No ready curl for github", `psql "$DATABASE_URL"`} {
		if !strings.Contains(walk, want) {
			t.Errorf("inlet dev's walkthrough lacks %q:\n%s", want, walk)
		}
	}
	if strings.Contains(walk, "X-Hub-Signature-256") || strings.Contains(walk, "token:") {
		t.Errorf("inlet dev prints a signed request or the admin token:\n%s", walk)
	}

	// Failures that could echo a URL or a secret.
	unreachable := "postgres://postgres:" + password + "@127.0.0.1:1/inlet?connect_timeout=2"
	for _, bad := range []string{
		unreachable,
		"postgres://postgres:" + password + "@127.0.0.1:notaport/inlet",
		"host=127.0.0.1 port=1 user=postgres password=" + password + " dbname=inlet connect_timeout=2",
	} {
		run(false, "migrate", "--database-url", bad)
		run(false, "retention", "--database-url", bad)
		run(false, "roles", "list", "--database-url", bad)
	}
	env = cleanEnv("DATABASE_URL="+unreachable, "GITHUB_WEBHOOK_SECRET="+ghSecret, "INLET_ADMIN_TOKEN="+adminToken)
	run(false, "events", "list")
	run(false, "dlq", "list")
	run(false, "audit", "verify")
	run(false, "send", "github", "--url", "http://hook:"+password+"@127.0.0.1:1")
	failing := start(t, env, "dev", "--listen", freeAddr(t), "--data-dir", t.TempDir())
	select {
	case <-failing.done:
	case <-time.After(time.Minute):
		t.Fatal("inlet dev on an unreachable database did not exit")
	}
	check("inlet dev (unreachable database)", failing.out()+failing.errOut())

	t.Logf("searched the output of %d runs for %d canaries", ran, len(c.list))
	if len(hits) > 0 {
		t.Fatalf("secrets printed:\n%s", strings.Join(hits, "\n"))
	}
}
