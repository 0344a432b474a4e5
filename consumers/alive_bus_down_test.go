package consumers_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/consumers"
	"github.com/inlet-dev/inlet/consumers/bus"
	"github.com/inlet-dev/inlet/consumers/bus/natsbus"
	"github.com/inlet-dev/inlet/consumers/internal/consumertest"
	"github.com/inlet-dev/inlet/internal/natstest"
	"github.com/inlet-dev/inlet/internal/testwait"
	"github.com/inlet-dev/inlet/schema/queries"
)

// busCutProxy forwards TCP connections to addr until cut: then it closes
// every connection and refuses new ones (the consumer's network path to
// NATS gone; Postgres and the streamer's path to NATS unaffected).
type busCutProxy struct {
	ln    net.Listener
	addr  string
	mu    sync.Mutex
	cut   bool
	conns []net.Conn
}

func newBusCutProxy(t *testing.T, addr string) *busCutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &busCutProxy{ln: ln, addr: addr}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", addr)
			if err != nil {
				_ = c.Close()
				continue
			}
			if !p.track(c, s) {
				continue
			}
			go func() { _, _ = io.Copy(s, c); _ = s.Close() }()
			go func() { _, _ = io.Copy(c, s); _ = c.Close() }()
		}
	}()
	t.Cleanup(p.cutOff)
	return p
}

func (p *busCutProxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut {
		for _, c := range cs {
			_ = c.Close()
		}
		return false
	}
	p.conns = append(p.conns, cs...)
	return true
}

func (p *busCutProxy) url() string { return "nats://" + p.ln.Addr().String() }

func (p *busCutProxy) cutOff() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut {
		return
	}
	p.cut = true
	_ = p.ln.Close()
	for _, c := range p.conns {
		_ = c.Close()
	}
}

// TestConsumerCutOffFromNATSIsNotAliveAndSpendsNoAttempts (review helper-243, fixed).
//
// Defect: a consumer service whose connection to NATS is down (a network
// path or NetworkPolicy change between its pod and NATS, expired NATS
// credentials: Postgres and the streamer's own NATS path unaffected) keeps
// telling Postgres it is alive for its handlers every AliveInterval
// (consumers/alive.go: aliveLoop / sayAliveLocked write ConsumerAlive
// whatever the Subscriber's health; only Service.Healthy, i.e. /readyz,
// reports "nats: not connected"). The streamer therefore keeps leasing the
// handler's jobs (CountLeasedJobs: not quiet) and publishing references
// JetStream stores fine, and the reaper (ReapExpiredLeases) counts every
// expiry as an attempt because "a consumer that could have received the
// job's reference was alive after the lease began" (docs/pipeline.md,
// Recovery; streamer/doc.go 4.): this consumer could not receive anything.
// Each lease + reap interval spends one attempt of the jobs out, and they
// are dead-lettered (lease_expired) although no handler was ever called, for
// as long as the cut lasts. The bus outage was supposed to cost latency,
// never attempts ("A lost bus message costs latency, never data").
//
// Setup: real NATS and PostgreSQL. A consumer of handler h (MaxAttempts 1,
// AliveInterval 100 ms) reaches NATS through a TCP proxy; the "streamer"
// (ClaimJobs + a natsbus of its own, straight to NATS) and the reaper
// (ReapExpiredLeases as webhook_streamer) run as the streamer does. The
// proxy is cut; the consumer's Healthy then reports NATS not connected. One
// job is claimed under a 1.5 s lease and its reference published (stored by
// JetStream). After the lease the reaper runs once.
//
// Expected: the consumer could not have received the reference, so the
// expiry is an outage: the job is pending again with its attempt not
// counted (attempt_count 0), as when the consumer is down.
// Observed before the fix: the job is dead_letter (last_error_class lease_expired,
// attempt_count 1), its handler called 0 times, while the consumer's own
// Healthy said "nats: not connected".
//
// Fixed by helper-249: sayAliveLocked (consumers/alive.go) writes no
// liveness while the Subscriber reports itself unhealthy (the check
// Service.Healthy makes: natsbus not connected, or a durable not consuming),
// so the consumer's last write runs out as a stopped one's does (the
// streamer holds the handler quiet, the reaper judges later expiries an
// outage); a take in that state extends its lease instead, and the alive
// loop writes again as soon as the bus is back
// (TestConsumerSaysAliveAgainAsSoonAsTheBusIsBack).
func TestConsumerCutOffFromNATSIsNotAliveAndSpendsNoAttempts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	srv := natstest.Start(t)
	proxy := newBusCutProxy(t, strings.TrimPrefix(srv.URL(), "nats://"))
	ctx := context.Background()
	newBus := func(name, url string) *natsbus.NATS {
		n, err := natsbus.New(ctx, natsbus.Config{URL: url, Name: name, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { n.Close() })
		return n
	}
	consumerBus := newBus("consumer", proxy.url())
	streamerBus := newBus("streamer", srv.URL())

	var calls atomic.Int64
	cfg := b.config(consumers.Handler{Name: "h", MaxAttempts: 1,
		Func: func(context.Context, *consumers.Event) error { calls.Add(1); return nil }})
	cfg.Subscriber = consumerBus
	cfg.AliveInterval = 100 * time.Millisecond
	cfg.LeaseExtend = time.Second
	svc := b.start(t, cfg)

	// The consumer's path to NATS goes away; Postgres stays reachable.
	proxy.cutOff()
	testwait.Eventually(t, wait, "the consumer to see NATS gone", func() (bool, string) {
		err := svc.Healthy()
		return err != nil, "Healthy: nil"
	})
	t.Logf("consumer Healthy while cut off: %v", svc.Healthy())
	// Past what a liveness write from before the cut covers (its seen_at is
	// 250 ms ahead, plus an AliveInterval): with the fix, the lease below
	// begins after the consumer's last word.
	time.Sleep(time.Second)
	// ... so the streamer holds h: its only consumer is no longer alive.
	var counts []queries.CountLeasedJobsRow
	if err := consumertest.AsRole(ctx, b.Admin, "webhook_streamer", func(tx pgx.Tx) error {
		var err error
		counts, err = queries.New(tx).CountLeasedJobs(ctx)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(counts, func(r queries.CountLeasedJobsRow) bool { return r.Handler == "h" && r.Quiet }) {
		t.Errorf("the only consumer of h is cut off from NATS, yet h is not quiet for the streamer (CountLeasedJobs: %+v): it goes on leasing h's jobs", counts)
	}

	id := b.JobID(t, b.InsertEvent(t, consumertest.EventParams{}), "h")
	refs := b.ClaimOnce(t, 1500*time.Millisecond)
	if len(refs) != 1 || refs[0].JobID != id {
		t.Fatalf("claimed %+v, want job %d", refs, id)
	}
	msg, err := bus.NewBatchMessage(refs)
	if err != nil {
		t.Fatal(err)
	}
	if err := streamerBus.Publish(bus.Topic("h"), msg); err != nil {
		t.Fatalf("control: the streamer's publish over its own NATS path failed: %v", err)
	}

	time.Sleep(time.Until(refs[0].LeaseExpiresAt) + 700*time.Millisecond)
	if err := svc.Healthy(); err == nil {
		t.Fatal("control: the consumer reconnected to NATS meanwhile")
	}
	var reaped []queries.ReapExpiredLeasesRow
	if err := consumertest.AsRole(ctx, b.Admin, "webhook_streamer", func(tx pgx.Tx) error {
		var err error
		reaped, err = queries.New(tx).ReapExpiredLeases(ctx, 100)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	j := b.Job(t, id)
	t.Logf("after the reap: status %s, attempts %d, class %v, handler calls %d, reaped %d",
		j.Status, j.AttemptCount, deref(j.LastErrorClass), calls.Load(), len(reaped))
	if calls.Load() != 0 {
		t.Fatalf("control: the handler ran %d times though the consumer was cut off from NATS", calls.Load())
	}
	if j.Status != "pending" || j.AttemptCount != 0 {
		t.Errorf("job %d: the only consumer of h was cut off from NATS (its Healthy: %v) and could not receive the reference, "+
			"yet the reaper counted the expiry as an attempt: status %s, attempt_count %d, last_error_class %s, handler called %d times. "+
			"Want: pending with the attempt not counted (an outage), as while the consumer is down",
			id, svc.Healthy(), j.Status, j.AttemptCount, deref(j.LastErrorClass), calls.Load())
	}
}
