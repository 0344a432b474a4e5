package tests

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stripe/stripe-go/v82/webhook"

	"github.com/inlet-dev/inlet/consumers"
	"github.com/inlet-dev/inlet/consumers/bus"
	"github.com/inlet-dev/inlet/ingress"
	"github.com/inlet-dev/inlet/ingress/sources"
	"github.com/inlet-dev/inlet/ingress/verify"
	"github.com/inlet-dev/inlet/internal/database"
	"github.com/inlet-dev/inlet/internal/notify"
	"github.com/inlet-dev/inlet/internal/pgtest"
	"github.com/inlet-dev/inlet/internal/testwait"
	"github.com/inlet-dev/inlet/schema"
	"github.com/inlet-dev/inlet/streamer"
)

const pipelineStripeSecret = "whsec_pipeline_test"

// pipeline is ingress, streamers and consumer services in this process, each
// on its own pool and role, sharing one in-process bus, as in inlet dev.
type pipeline struct {
	t        *testing.T
	url      string
	admin    *pgxpool.Pool
	ingress  string // base URL
	bus      bus.PubSub
	quiet    *slog.Logger
	services []*consumers.Service
}

func newPipeline(t *testing.T) *pipeline {
	t.Helper()
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	p := &pipeline{t: t, url: url, quiet: slog.New(slog.DiscardHandler)}
	p.admin = p.pool(t, "", 8)
	p.bus = bus.NewGoChannel(p.quiet)
	t.Cleanup(func() { p.bus.Close() })

	ingPool := p.pool(t, schema.IngressRole, 16)
	hinter := notify.NewHinter(ingPool, 0, p.quiet)
	t.Cleanup(hinter.Stop)
	srv, err := ingress.New(ingress.Config{
		Sources: []sources.Source{{Name: "stripe", Config: verify.Config{Type: "stripe", Secrets: []string{pipelineStripeSecret}}}},
		Store:   ingress.NewPGStore(ingPool, hinter),
		Logger:  p.quiet,
	})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	p.ingress = hs.URL
	_ = ctx
	return p
}

func (p *pipeline) pool(t *testing.T, role string, max int32) *pgxpool.Pool {
	t.Helper()
	pool, err := database.Open(context.Background(), p.url, database.Options{Role: role, MaxConns: max})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// startConsumers starts one consumer service with handlers. Start them before
// the streamers: the in-process bus drops what nobody subscribes to yet (the
// lease would recover it, slowly).
func (p *pipeline) startConsumers(t *testing.T, workerID string, handlers ...consumers.Handler) {
	t.Helper()
	svc, err := consumers.New(consumers.Config{
		Pool: p.pool(t, schema.WorkerRole, 16), Subscriber: p.bus, Handlers: handlers,
		WorkerID: workerID, LeaseExtend: 2 * time.Second, Logger: p.quiet,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = svc.Stop(ctx)
	})
	p.services = append(p.services, svc)
}

func (p *pipeline) startStreamer(t *testing.T, cfg streamer.Config) *streamer.Streamer {
	t.Helper()
	cfg.Pool = p.pool(t, schema.StreamerRole, 4)
	cfg.Publisher = p.bus
	cfg.Logger = p.quiet
	url := p.url
	cfg.ListenConnect = func(ctx context.Context) (*pgx.Conn, error) { return pgx.Connect(ctx, url) }
	s, err := streamer.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

// sendStripe posts a Stripe-signed event (signed by stripe-go) and requires 200.
func (p *pipeline) sendStripe(t *testing.T, body []byte) {
	t.Helper()
	signed := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: body, Secret: pipelineStripeSecret})
	req, _ := http.NewRequest(http.MethodPost, p.ingress+"/webhooks/stripe", bytes.NewReader(body))
	req.Header.Set("Stripe-Signature", signed.Header)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	answer, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("ingress answered %d %s", resp.StatusCode, answer)
	}
}

func (p *pipeline) jobStatus(t *testing.T, handler string) (status string, attempts int, class *string) {
	t.Helper()
	err := p.admin.QueryRow(context.Background(), `SELECT status, attempt_count, last_error_class FROM webhook_ingress.jobs WHERE handler = $1`, handler).
		Scan(&status, &attempts, &class)
	if err != nil {
		t.Fatalf("job of %s: %v", handler, err)
	}
	return
}

func (p *pipeline) waitJob(t *testing.T, handler, status string, within time.Duration) {
	t.Helper()
	testwait.Eventually(t, within, fmt.Sprintf("the job of %s %s", handler, status), func() (bool, string) {
		got, attempts, _ := p.jobStatus(t, handler)
		return got == status, fmt.Sprintf("%s after %d attempts", got, attempts)
	})
}

// outcomes is the handler's attempt history through the view attempts:
// failures from job_attempts, the success from its job row (010_lease_token).
func (p *pipeline) outcomes(t *testing.T, handler string) []string {
	t.Helper()
	rows, err := p.admin.Query(context.Background(), `SELECT a.outcome FROM webhook_ingress.attempts a
		JOIN webhook_ingress.jobs j ON j.id = a.job_id WHERE j.handler = $1 ORDER BY a.id`, handler)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// callLog records handler calls.
type callLog struct {
	mu    sync.Mutex
	calls []call
}

type call struct {
	at      time.Time
	body    []byte
	attempt int
	key     string
}

func (l *callLog) add(e *consumers.Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls = append(l.calls, call{at: time.Now(), body: bytes.Clone(e.Body), attempt: e.Attempt, key: e.IdempotencyKey()})
}

func (l *callLog) get() []call {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]call(nil), l.calls...)
}

func TestSignedEventReachesEverySubscribedHandlerWithTheExactBytes(t *testing.T) {
	t.Parallel()
	p := newPipeline(t)
	var billing, audit, other callLog
	p.startConsumers(t, "w1",
		consumers.Handler{Name: "billing", Provider: "stripe", EventType: "invoice.*", Func: func(_ context.Context, e *consumers.Event) error { billing.add(e); return nil }},
		consumers.Handler{Name: "audit", Func: func(_ context.Context, e *consumers.Event) error { audit.add(e); return nil }},
		consumers.Handler{Name: "github-only", Provider: "github", Func: func(_ context.Context, e *consumers.Event) error { other.add(e); return nil }},
	)
	p.startStreamer(t, streamer.Config{})
	body := []byte("{\"id\":\"evt_exact\", \"type\":\"invoice.paid\",\"amount\":1e3}\n")
	p.sendStripe(t, body)
	p.waitJob(t, "billing", "completed", 10*time.Second)
	p.waitJob(t, "audit", "completed", 10*time.Second)
	for name, l := range map[string]*callLog{"billing": &billing, "audit": &audit} {
		calls := l.get()
		if len(calls) != 1 || !bytes.Equal(calls[0].body, body) {
			t.Fatalf("%s: %d calls %+v; want one call with the exact bytes", name, len(calls), calls)
		}
	}
	if n := len(other.get()); n != 0 {
		t.Fatalf("unsubscribed handler called %d times", n)
	}
}

// Handler A fails twice then succeeds; handler B of the same event succeeds
// once: B runs once, A three times with its backoff between attempts.
func TestRetriesAreIsolatedPerHandler(t *testing.T) {
	t.Parallel()
	p := newPipeline(t)
	const backoff = 700 * time.Millisecond
	var a, b callLog
	var aCalls atomic.Int32
	p.startConsumers(t, "w1",
		consumers.Handler{Name: "a", Backoff: func(int) time.Duration { return backoff }, Func: func(_ context.Context, e *consumers.Event) error {
			a.add(e)
			if aCalls.Add(1) <= 2 {
				return errors.New("downstream not ready")
			}
			return nil
		}},
		consumers.Handler{Name: "b", Func: func(_ context.Context, e *consumers.Event) error { b.add(e); return nil }},
	)
	p.startStreamer(t, streamer.Config{PollInterval: 50 * time.Millisecond})
	p.sendStripe(t, []byte(`{"id":"evt_retry","type":"charge.succeeded"}`))
	p.waitJob(t, "a", "completed", 20*time.Second)
	p.waitJob(t, "b", "completed", 5*time.Second)
	testwait.Consistently(t, 200*time.Millisecond, "a called 3 times, b once: no wrong extra call", func() (bool, string) {
		na, nb := len(a.get()), len(b.get())
		return na == 3 && nb == 1, fmt.Sprintf("a called %d times, b %d", na, nb)
	})
	ac := a.get()
	for i := 1; i < len(ac); i++ {
		if gap := ac[i].at.Sub(ac[i-1].at); gap < backoff {
			t.Errorf("attempt %d of a came %s after the previous one, before its %s backoff", i+1, gap, backoff)
		}
		if ac[i].attempt != i+1 || ac[i].key != ac[0].key {
			t.Errorf("attempt %d: attempt=%d key=%q (first key %q)", i+1, ac[i].attempt, ac[i].key, ac[0].key)
		}
	}
	if got := fmt.Sprint(p.outcomes(t, "a")); got != "[failed failed completed]" {
		t.Errorf("history of a = %s", got)
	}
	if got := fmt.Sprint(p.outcomes(t, "b")); got != "[completed]" {
		t.Errorf("history of b = %s", got)
	}
}

func TestAlwaysFailingHandlerEndsInDeadLetterAlone(t *testing.T) {
	t.Parallel()
	p := newPipeline(t)
	var ok callLog
	p.startConsumers(t, "w1",
		consumers.Handler{Name: "broken", MaxAttempts: 3, Backoff: func(int) time.Duration { return 10 * time.Millisecond },
			Func: func(context.Context, *consumers.Event) error {
				return consumers.WithClass(errors.New("500 from billing"), consumers.ClassHTTP5xx)
			}},
		consumers.Handler{Name: "fine", Func: func(_ context.Context, e *consumers.Event) error { ok.add(e); return nil }},
	)
	p.startStreamer(t, streamer.Config{PollInterval: 50 * time.Millisecond})
	p.sendStripe(t, []byte(`{"id":"evt_dead","type":"x"}`))
	p.waitJob(t, "broken", "dead_letter", 20*time.Second)
	p.waitJob(t, "fine", "completed", 5*time.Second)
	if _, attempts, class := p.jobStatus(t, "broken"); attempts != 3 || class == nil || *class != "http_5xx" {
		t.Fatalf("dead letter: %d attempts, class %v", attempts, class)
	}
	if got := fmt.Sprint(p.outcomes(t, "broken")); got != "[failed failed dead_letter]" {
		t.Fatalf("history = %s", got)
	}
	if n := len(ok.get()); n != 1 {
		t.Fatalf("the healthy handler ran %d times", n)
	}
}

// With NOTIFY (polling every hour), a job reaches its handler within tens of
// milliseconds of the ingress 200; asserted loosely here, measured by the
// benchmark.
func TestNotifyDeliversQuickly(t *testing.T) {
	t.Parallel()
	p := newPipeline(t)
	got := make(chan time.Time, 10)
	p.startConsumers(t, "w1", consumers.Handler{Name: "fast", Func: func(context.Context, *consumers.Event) error {
		got <- time.Now()
		return nil
	}})
	s := p.startStreamer(t, streamer.Config{PollInterval: time.Hour})
	testwait.Eventually(t, 15*time.Second, "the listener connected", func() (bool, string) {
		up, reconnects := s.Listener().Connected()
		return up, fmt.Sprintf("connected %v after %d reconnects", up, reconnects)
	})
	var worst time.Duration
	for i := 0; i < 5; i++ {
		sent := time.Now()
		p.sendStripe(t, fmt.Appendf(nil, `{"id":"evt_fast_%d","type":"x"}`, i))
		select {
		case at := <-got:
			worst = max(worst, at.Sub(sent))
			t.Logf("event %d: %s", i, at.Sub(sent))
		case <-time.After(2 * time.Second):
			t.Fatalf("event %d not handled within 2s of the 200", i)
		}
		time.Sleep(150 * time.Millisecond) // past the hint debounce: each one is a leading-edge NOTIFY
	}
	t.Logf("worst ingress-to-handler latency over 5 events: %s", worst)
}

// Two streamers and two consumer services over 5,000 jobs: every job is
// completed, exactly one attempt each, none lost.
func TestTwoStreamersTwoConsumersFiveThousandJobs(t *testing.T) {
	t.Parallel()
	p := newPipeline(t)
	var handled sync.Map
	var dup atomic.Int32
	h := func(_ context.Context, e *consumers.Event) error {
		if _, seen := handled.LoadOrStore(e.JobID, true); seen {
			dup.Add(1)
		}
		return nil
	}
	p.startConsumers(t, "w1", consumers.Handler{Name: "bulk", Func: h, Concurrency: 16})
	p.startConsumers(t, "w2", consumers.Handler{Name: "bulk", Func: h, Concurrency: 16})
	const jobs = 5000
	// Through the same insert path as ingress, in large statements.
	_, err := p.admin.Exec(context.Background(), `INSERT INTO webhook_ingress.events
		(provider, scheme, external_event_id, event_type, raw_body, signature_verified)
		SELECT 'stripe', 'stripe', 'evt_bulk_' || g, 'x', '{}', true FROM generate_series(1, $1) g`, jobs)
	if err != nil {
		t.Fatal(err)
	}
	s1 := p.startStreamer(t, streamer.Config{ID: "s1", PollInterval: 50 * time.Millisecond, LeaseDuration: 5 * time.Minute})
	s2 := p.startStreamer(t, streamer.Config{ID: "s2", PollInterval: 50 * time.Millisecond, LeaseDuration: 5 * time.Minute})
	testwait.Eventually(t, 2*time.Minute, fmt.Sprintf("all %d jobs completed", jobs), func() (bool, string) {
		var done int
		err := p.admin.QueryRow(context.Background(), `SELECT count(*) FROM webhook_ingress.jobs WHERE status = 'completed'`).Scan(&done)
		return done == jobs, fmt.Sprintf("%d completed (%v)", done, err)
	})
	var attempts, jobsWithOne, workers int
	err = p.admin.QueryRow(context.Background(), `SELECT count(*),
		(SELECT count(*) FROM (SELECT job_id FROM webhook_ingress.attempts GROUP BY job_id HAVING count(*) = 1 AND bool_and(outcome = 'completed')) x),
		count(DISTINCT worker_id) FROM webhook_ingress.attempts`).Scan(&attempts, &jobsWithOne, &workers)
	if err != nil {
		t.Fatal(err)
	}
	if attempts != jobs || jobsWithOne != jobs || dup.Load() != 0 {
		t.Fatalf("%d attempts, %d jobs with exactly one completed attempt, %d duplicate calls; want %d, %d, 0", attempts, jobsWithOne, dup.Load(), jobs, jobs)
	}
	if workers != 2 {
		t.Errorf("work done by %d consumer services, want both", workers)
	}
	st1, st2 := s1.Stats(), s2.Stats()
	if st1.Claimed+st2.Claimed != jobs {
		t.Fatalf("streamers leased %d + %d jobs, want %d in all (none twice)", st1.Claimed, st2.Claimed, jobs)
	}
	t.Logf("leased by s1 %d, s2 %d", st1.Claimed, st2.Claimed)
}
