package tests

import (
	"bytes"
	"context"
	"fmt"
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
	"github.com/inlet-dev/inlet/ingress/verify"
	"github.com/inlet-dev/inlet/internal/natstest"
	"github.com/inlet-dev/inlet/internal/pgtest"
	"github.com/inlet-dev/inlet/internal/testwait"
)

// sendGitHub posts a GitHub-signed webhook and requires 200.
func sendGitHub(t *testing.T, base, secret, delivery string, body []byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, base+"/webhooks/github", bytes.NewReader(body))
	for k, v := range verify.SignGitHub(secret, delivery, "push", body) {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("delivery %s: ingress answered %d", delivery, resp.StatusCode)
	}
}

// servicesConfig is a config for ingress, streamer and consumer as separate
// processes over NATS, forwarding every event to target.
func servicesConfig(t *testing.T, natsURL, target, secret string, streamerExtra ...string) (path, ingressAddr string) {
	t.Helper()
	ingressAddr = freeAddr(t)
	// streamer settings: these defaults, overridden by streamerExtra ("key: value").
	settings := map[string]string{"lease_duration": "3s", "reap_interval": "250ms", "poll_interval": "250ms", "health_listen": `"127.0.0.1:0"`}
	for _, l := range streamerExtra {
		k, v, _ := strings.Cut(l, ": ")
		settings[k] = v
	}
	extra := ""
	for k, v := range settings {
		extra += "\n  " + k + ": " + v
	}
	path = writeFile(t, t.TempDir(), "inlet.yaml", fmt.Sprintf(`
database_url: ${DATABASE_URL}
ingress:
  listen: %q
  metrics_listen: "127.0.0.1:0"
sources:
  - name: github
    type: github
    secrets: ["e2e-services-secret"]
bus:
  kind: nats
  url: %q
streamer:%s
consumer:
  lease_extend: 1s
  health_listen: "127.0.0.1:0"
  handlers:
    - name: forward
      type: http-forward
      url: %q
      secret: %q
      timeout: 5s
      concurrency: 16
`, ingressAddr, natsURL, extra, target, secret))
	return path, ingressAddr
}

// countingTarget answers 204 and counts deliveries per idempotency key; it
// also keeps each URL path's calls in the order they arrived, and answers
// 500 on the paths set failing.
type countingTarget struct {
	mu      sync.Mutex
	keys    map[string]int
	bad     int
	calls   map[string][]targetCall
	failing map[string]bool
	failed  int
}

// setFailing makes the target answer 500 on path, or stop doing so.
func (c *countingTarget) setFailing(path string, fail bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.failing[path] = fail
}

// targetCall is one forwarded request: its job, the event's body and when
// it arrived.
type targetCall struct {
	job  string
	body []byte
	at   time.Time
}

func newCountingTarget(t *testing.T, secret string) (*countingTarget, string) {
	ct := &countingTarget{keys: map[string]int{}, calls: map[string][]targetCall{}, failing: map[string]bool{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		ct.mu.Lock()
		if err != nil || httpforward.Verify(secret, r.Header, body, 0, time.Now()) != nil {
			ct.bad++
		}
		ct.keys[r.Header.Get(httpforward.HeaderIdempotencyKey)]++
		ct.calls[r.URL.Path] = append(ct.calls[r.URL.Path], targetCall{r.Header.Get(httpforward.HeaderJobID), body, time.Now()})
		fail := ct.failing[r.URL.Path]
		if fail {
			ct.failed++
		}
		ct.mu.Unlock()
		if fail {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	return ct, srv.URL
}

func (c *countingTarget) distinct() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.keys)
}

// waitDistinct waits until n distinct jobs have reached the target.
func (c *countingTarget) waitDistinct(t *testing.T, n int, within time.Duration) {
	t.Helper()
	testwait.Eventually(t, within, fmt.Sprintf("%d distinct jobs delivered", n), func() (bool, string) {
		got := c.distinct()
		return got >= n, fmt.Sprintf("%d delivered", got)
	})
}

// inlet ingress, two inlet streamer and three inlet consumer replicas, each
// its own process, over a real NATS: every stored webhook reaches the
// internal service, signed; the replicas share the work and no job is leased
// twice (one attempt each).
func TestSeparateServicesOverNATS(t *testing.T) {
	t.Parallel()
	nats := natstest.Start(t)
	dbURL := pgtest.NewDatabase(t)
	const secret = "services-forward-secret"
	target, targetURL := newCountingTarget(t, secret)
	cfg, addr := servicesConfig(t, nats.URL(), targetURL, secret)
	env := cleanEnv("DATABASE_URL=" + dbURL)

	// Consumers first: they register the subscription that fans events out.
	var procs []*proc
	for i := 0; i < 3; i++ {
		c := start(t, env, "consumer", "--config", cfg)
		c.waitLog("consumers started", 30*time.Second)
		procs = append(procs, c)
	}
	for i := 0; i < 2; i++ {
		st := start(t, env, "streamer", "--config", cfg)
		st.waitLog("streamer started", 30*time.Second)
		procs = append(procs, st)
	}
	ing := start(t, env, "ingress", "--config", cfg)
	ing.waitLog("ingress listening", 30*time.Second)
	procs = append(procs, ing)

	const n = 600
	out, errOut, code := runInlet(t, env, "send", "github", "--config", cfg, "--url", "http://"+addr, "--id", "svc-0")
	if code != 0 || !strings.Contains(out, "stored") {
		t.Fatalf("inlet send: %s %s", out, errOut)
	}
	for i := 1; i < n; i++ {
		sendGitHub(t, "http://"+addr, "e2e-services-secret", fmt.Sprintf("svc-%d", i), []byte(`{"zen":"e2e"}`))
	}
	target.waitDistinct(t, n, 60*time.Second)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var workers int
	testwait.Eventually(t, 30*time.Second, fmt.Sprintf("all %d jobs completed", n), func() (bool, string) {
		var completed int
		if err := conn.QueryRow(ctx, `SELECT count(*) FILTER (WHERE status = 'completed'), count(DISTINCT worker_id)
			FROM webhook_ingress.jobs`).Scan(&completed, &workers); err != nil {
			t.Fatal(err)
		}
		return completed == n, fmt.Sprintf("%d completed", completed)
	})
	if workers != 3 {
		t.Errorf("jobs done by %d consumer replicas, want 3 sharing the work", workers)
	}
	var attempts, onePerJob int
	// Every finished attempt, failures and successes (on the job row since
	// 010_lease_token) alike: the view attempts.
	if err := conn.QueryRow(ctx, `SELECT count(*), (SELECT count(*) FROM (SELECT job_id FROM webhook_ingress.attempts
		GROUP BY job_id HAVING count(*) = 1) x) FROM webhook_ingress.attempts`).Scan(&attempts, &onePerJob); err != nil {
		t.Fatal(err)
	}
	if attempts != n || onePerJob != n {
		t.Errorf("%d attempts, %d jobs with exactly one: a job was leased twice", attempts, onePerJob)
	}
	target.mu.Lock()
	dups := 0
	for _, c := range target.keys {
		dups += c - 1
	}
	target.mu.Unlock()
	if dups != 0 {
		t.Errorf("%d duplicate deliveries without any failure", dups)
	}
	target.mu.Lock()
	bad := target.bad
	target.mu.Unlock()
	if bad != 0 {
		t.Fatalf("%d deliveries failed the Inlet-Signature check", bad)
	}
	for _, p := range procs {
		if err := p.stop(); err != nil {
			t.Errorf("exit after SIGTERM: %v\n%s", err, p.errOut())
		}
	}
}

func TestSeparateServiceRefusesTheInProcessBus(t *testing.T) {
	t.Parallel()
	cfg := writeFile(t, t.TempDir(), "inlet.yaml", "database_url: postgres://127.0.0.1:1/x\nconsumer:\n  handlers:\n    - {name: l, type: log}\n")
	for _, svc := range []string{"streamer", "consumer"} {
		_, errOut, code := runInlet(t, cleanEnv(), svc, "--config", cfg)
		if code != 1 || !strings.Contains(errOut, "bus.kind") {
			t.Errorf("%s with bus gochannel: exit %d, %q", svc, code, errOut)
		}
	}
}

// streamer.wake: replication, with polling effectively off: jobs reach
// consumers through the WAL wake-up, and a streamer killed and restarted on
// the same slot misses none of the jobs created while it was down.
func TestReplicationWakeSurvivesStreamerRestart(t *testing.T) {
	t.Parallel()
	nats := natstest.Start(t)
	dbURL := pgtest.NewDatabase(t)
	const secret = "replication-forward-secret"
	target, targetURL := newCountingTarget(t, secret)
	cfg, addr := servicesConfig(t, nats.URL(), targetURL, secret,
		"wake: replication", "slot_name: inlet_e2e_"+strings.ReplaceAll(strings.ToLower(t.Name()), "/", "_")[:20], "poll_interval: 1h")
	env := cleanEnv("DATABASE_URL=" + dbURL)
	c := start(t, env, "consumer", "--config", cfg)
	c.waitLog("consumers started", 30*time.Second)
	st := start(t, env, "streamer", "--config", cfg)
	st.waitLog("streamer started", 30*time.Second)
	ing := start(t, env, "ingress", "--config", cfg)
	ing.waitLog("ingress listening", 30*time.Second)
	base := "http://" + addr
	waitDelivered := func(n int) {
		t.Helper()
		target.waitDistinct(t, n, 30*time.Second)
	}
	for i := 0; i < 5; i++ {
		start := time.Now()
		sendGitHub(t, base, "e2e-services-secret", fmt.Sprintf("repl-%d", i), []byte(`{"n":1}`))
		waitDelivered(i + 1)
		t.Logf("webhook %d delivered %s after the 200 (polling every hour)", i, time.Since(start))
	}
	_ = st.cmd.Process.Signal(syscall.SIGKILL)
	<-st.done
	for i := 5; i < 15; i++ {
		sendGitHub(t, base, "e2e-services-secret", fmt.Sprintf("repl-%d", i), []byte(`{"n":1}`))
	}
	st2 := start(t, env, "streamer", "--config", cfg)
	st2.waitLog("streamer started", 60*time.Second)
	waitDelivered(15)
	sendGitHub(t, base, "e2e-services-secret", "repl-after", []byte(`{"n":1}`))
	waitDelivered(16)
	for _, p := range []*proc{ing, st2, c} {
		if err := p.stop(); err != nil {
			t.Errorf("exit after SIGTERM: %v", err)
		}
	}
	// The slot outlives the streamer; drop it so the test database can go.
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	_, _ = conn.Exec(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = current_database() AND NOT active`)
}
