package tests

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/ingress/verify"
	"github.com/inlet-dev/inlet/internal/natstest"
	"github.com/inlet-dev/inlet/internal/pgcluster"
	"github.com/inlet-dev/inlet/internal/pgtest"
	"github.com/inlet-dev/inlet/schema"
)

// service is a restartable inlet process.
type service struct {
	name string
	args []string
	env  []string
	mu   sync.Mutex
	p    *proc
}

func (s *service) start(t *testing.T) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.p = start(t, s.env, s.args...)
}

func (s *service) kill(t *testing.T) {
	s.mu.Lock()
	p := s.p
	s.mu.Unlock()
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// 10,000 signed webhooks while processes are SIGKILLed and restarted every
// few seconds, Postgres crashes once and NATS once: every acknowledged
// webhook is stored exactly once, every job completes, no handler effect is
// lost. Two streamers and three consumer replicas share the work.
func TestChaosNothingAcknowledgedIsLost(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const total = 10000
	const ghSecret = "chaos-github-secret"
	const fwdSecret = "chaos-forward-secret-0123"

	cluster, err := pgcluster.New(ctx, pgcluster.Config{Dir: filepath.Join(pgtest.TempDir(t), "pg"), Install: true,
		Settings: map[string]string{"max_connections": "200"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := cluster.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cluster.Stop() })
	dbURL := cluster.URL("postgres")
	func() {
		conn, err := pgx.Connect(ctx, dbURL)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		if _, err := schema.Migrate(ctx, conn); err != nil {
			t.Fatal(err)
		}
	}()
	nats := natstest.Start(t)

	target, targetURL := newCountingTarget(t, fwdSecret)
	ingressAddrs := []string{freeAddr(t), freeAddr(t)}
	cfg := writeFile(t, t.TempDir(), "inlet.yaml", fmt.Sprintf(`
database_url: ${DATABASE_URL}
ingress:
  metrics_listen: "127.0.0.1:0"
sources:
  - name: github
    type: github
    secrets: [%q]
bus:
  kind: nats
  url: %q
  ack_wait: 5s
streamer:
  lease_duration: 4s
  max_leased_per_handler: 300
  reap_interval: 500ms
  poll_interval: 500ms
  health_listen: "127.0.0.1:0"
consumer:
  lease_extend: 2s
  health_listen: "127.0.0.1:0"
  handlers:
    - name: effect
      type: http-forward
      url: %q
      secret: %q
      timeout: 5s
      concurrency: 16
      max_attempts: 1000
log:
  level: info
`, ghSecret, nats.URL(), targetURL, fwdSecret))
	env := cleanEnv("DATABASE_URL=" + dbURL)
	var services []*service
	add := func(name string, args ...string) *service {
		s := &service{name: name, args: append(args, "--config", cfg), env: env}
		services = append(services, s)
		return s
	}
	for i := 0; i < 3; i++ {
		add(fmt.Sprintf("consumer-%d", i), "consumer")
	}
	for i := 0; i < 2; i++ {
		add(fmt.Sprintf("streamer-%d", i), "streamer")
	}
	for i, a := range ingressAddrs {
		add(fmt.Sprintf("ingress-%d", i), "ingress", "--listen", a)
	}
	for _, s := range services {
		s.start(t)
		if s.args[0] == "consumer" {
			s.p.waitLog("consumers started", 60*time.Second) // the subscription exists before events arrive
		}
	}
	for _, s := range services[3:] {
		s.p.waitLog(map[string]string{"streamer": "streamer started", "ingress": "ingress listening"}[s.args[0]], 60*time.Second)
	}

	// Senders: like a provider, retry each webhook until it is acknowledged.
	var sent, acked, attempts atomic.Int64
	ackedIDs := make([]atomic.Bool, total)
	client := &http.Client{Timeout: 5 * time.Second}
	next := atomic.Int64{}
	var senders sync.WaitGroup
	sendCtx, stopSending := context.WithTimeout(ctx, 8*time.Minute)
	defer stopSending()
	for w := 0; w < 8; w++ {
		senders.Add(1)
		go func() {
			defer senders.Done()
			for {
				i := next.Add(1) - 1
				if i >= total {
					return
				}
				id := fmt.Sprintf("chaos-%05d", i)
				body := fmt.Appendf(nil, `{"n":%d}`, i)
				sent.Add(1)
				for sendCtx.Err() == nil {
					attempts.Add(1)
					req, _ := http.NewRequestWithContext(sendCtx, http.MethodPost,
						"http://"+ingressAddrs[rand.N(len(ingressAddrs))]+"/webhooks/github", bytes.NewReader(body))
					for k, v := range verify.SignGitHub(ghSecret, id, "push", body) {
						req.Header[k] = v
					}
					resp, err := client.Do(req)
					if err == nil {
						resp.Body.Close()
						if resp.StatusCode == http.StatusOK {
							ackedIDs[i].Store(true)
							acked.Add(1)
							break
						}
					}
					time.Sleep(50 * time.Millisecond)
				}
			}
		}()
	}

	// Chaos: a random process every 2-3 s; Postgres once, NATS once.
	chaosDone := make(chan struct{})
	var kills atomic.Int64
	go func() {
		defer close(chaosDone)
		for round := 0; sendCtx.Err() == nil && next.Load() < total; round++ {
			time.Sleep(time.Duration(2000+rand.N(1000)) * time.Millisecond)
			switch round {
			case 3:
				t.Log("chaos: Postgres crash (SIGKILL) and restart")
				_ = cluster.Kill()
				time.Sleep(time.Second)
				if err := cluster.Start(ctx); err != nil {
					t.Errorf("restart Postgres: %v", err)
					return
				}
			case 6:
				t.Log("chaos: NATS crash (SIGKILL) and restart")
				nats.Kill()
				time.Sleep(time.Second)
				if err := nats.Restart(); err != nil {
					t.Errorf("restart NATS: %v", err)
					return
				}
			default:
				s := services[rand.N(len(services))]
				s.kill(t)
				kills.Add(1)
				s.start(t)
			}
		}
	}()
	senders.Wait()
	<-chaosDone
	if sendCtx.Err() != nil {
		t.Fatalf("sending did not finish: %d of %d acknowledged", acked.Load(), total)
	}

	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var events, distinctIDs, jobs, completed, dead int
	deadline := time.Now().Add(4 * time.Minute)
	for {
		err := conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM webhook_ingress.events),
			(SELECT count(DISTINCT external_event_id) FROM webhook_ingress.events),
			count(*), count(*) FILTER (WHERE status = 'completed'), count(*) FILTER (WHERE status = 'dead_letter')
			FROM webhook_ingress.jobs`).Scan(&events, &distinctIDs, &jobs, &completed, &dead)
		if err != nil {
			t.Fatal(err)
		}
		if completed+dead == jobs && jobs >= int(acked.Load()) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 4 minutes: %d jobs, %d completed, %d dead letters", jobs, completed, dead)
		}
		time.Sleep(250 * time.Millisecond)
	}
	rows, err := conn.Query(ctx, `SELECT external_event_id FROM webhook_ingress.events`)
	if err != nil {
		t.Fatal(err)
	}
	stored, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	storedSet := make(map[string]bool, len(stored))
	for _, id := range stored {
		storedSet[id] = true
	}
	missing := 0
	for i := range ackedIDs {
		if ackedIDs[i].Load() && !storedSet[fmt.Sprintf("chaos-%05d", i)] {
			missing++
		}
	}
	rows, err = conn.Query(ctx, `SELECT outcome || coalesce('/' || error_class, '') || '=' || count(*)
		FROM webhook_ingress.attempts GROUP BY outcome, error_class ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	byOutcome, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("attempts by outcome/error class: %v", byOutcome)
	target.mu.Lock()
	effects, bad := len(target.keys), target.bad
	duplicateCalls := 0
	for _, n := range target.keys {
		duplicateCalls += n - 1
	}
	target.mu.Unlock()
	t.Logf("sent %d, acknowledged %d (%d HTTP attempts), stored %d, jobs %d, completed %d, dead-lettered %d, "+
		"distinct handler effects %d, duplicate handler calls %d, processes killed %d",
		sent.Load(), acked.Load(), attempts.Load(), events, jobs, completed, dead, effects, duplicateCalls, kills.Load())
	switch {
	case acked.Load() != total:
		t.Errorf("%d of %d webhooks acknowledged", acked.Load(), total)
	case missing != 0:
		t.Errorf("%d acknowledged webhooks are not in events", missing)
	case events != distinctIDs || events != total:
		t.Errorf("events %d, distinct ids %d, want %d each (exactly once)", events, distinctIDs, total)
	case jobs != total || completed != total:
		t.Errorf("jobs %d, completed %d, want %d", jobs, completed, total)
	case effects != total:
		t.Errorf("handler effects for %d jobs, want %d: effects were lost", effects, total)
	case bad != 0:
		t.Errorf("%d forwarded requests failed the signature check", bad)
	}
}
