package tests

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/consumers"
	"github.com/inlet-dev/inlet/consumers/bus/natsbus"
	"github.com/inlet-dev/inlet/internal/natstest"
	"github.com/inlet-dev/inlet/internal/testwait"
	"github.com/inlet-dev/inlet/schema"
	"github.com/inlet-dev/inlet/streamer"
)

// Found by review helper-85: over NATS, a slow handler's jobs are
// dead-lettered (last_error_class lease_expired) although its handler never
// ran them, never failed, and its consumer was alive and healthy the whole
// time.
//
// The streamer leases a claim's jobs and publishes them as messages of up to
// streamer.refs_per_message (32) references. The consumer acknowledges a
// message once its FIRST reference has a concurrency slot; the other 31 wait
// in the consumer's memory for slots (consumers/service.go:340-362), and
// nothing extends their leases while they wait (only a started attempt
// extends, consumers/attempt.go:227-257). When waiting takes longer than
// streamer.lease_duration (defaults: 60 s lease, 32 per message, so any
// concurrency-1 handler slower than ~2 s per job, e.g. an HTTP forward to a
// slow internal service), the reaper finds the lease expired and, because a
// consumer of the handler was alive (ReapExpiredLeases,
// schema/queries/jobs.sql:176-203), counts it as an attempt that ran and
// failed: the job goes back to pending, or to dead_letter on its last
// attempt. The re-leased references queue up behind the rest again, so a
// backlog burns attempts without ever running them and ends in the DLQ.
// streamer.max_leased_per_handler (5000) does not prevent it: its doc says a
// lagging handler's backlog "waits in Postgres, not leased in the bus", but
// 32 references of one message already exceed what a slow handler can start
// within one lease.
//
// Scaled down here: handler concurrency 1, 300 ms per job, lease 4 s, 32
// jobs, max_attempts 2: about the ratio of a 4.5 s handler with the default
// 60 s lease. (It was 150 ms and 2 s: the same ratio, but a machine loaded
// by a whole test run stalls the handler's process for longer than a 2 s
// lease's margin now and then.) Expected: every job completed (the handler never returns an error),
// no job dead-lettered, no attempt counted for a reference that never ran.
// Actual: jobs end in dead_letter with lease_expired, and the handler was
// never called for them.
func TestSlowHandlerBacklogIsNotDeadLettered(t *testing.T) {
	slowBacklog(t, 32, 300*time.Millisecond, 4*time.Second, streamer.Config{})
}

// A slow handler's backlog over NATS larger than a message: the references
// beyond the message a consumer has at hand wait in the bus, where nobody
// extends their leases, so the streamer holds each handler's leases to what
// its consumers start within half a lease (its pace). Before, it leased up to
// max_leased_per_handler (5000) at once, and with the defaults (60 s lease)
// a handler running 64 jobs a second had its backlog past ~3,800 burn an
// attempt each lease and end in the dead letters, never called. Scaled down:
// 300 jobs of 20 ms at concurrency 1, lease 4 s, claims of 20, messages of
// 10; the same 300 leased at once take 6 s to start. (The lease was 1 s,
// then 2 s: scaling the lease down does not scale a loaded machine's
// stalls, and a loaded CI lost the 1 s margin of a 2 s lease now and then;
// with MinLeasedPerHandler 5000, as before the pace, this fails.)
func TestSlowHandlerLeasesFollowItsPace(t *testing.T) {
	slowBacklog(t, 300, 20*time.Millisecond, 4*time.Second, streamer.Config{BatchSize: 20, RefsPerMessage: 10})
}

// slowBacklog runs jobs jobs of a healthy handler taking perJob each at
// concurrency 1 over NATS, through a streamer with lease (and cfg's batch
// settings), and fails when any ends other than completed or an attempt
// expired.
func slowBacklog(t *testing.T, jobs int, perJob, lease time.Duration, cfg streamer.Config) {
	p := newPipeline(t)
	srv := natstest.Start(t)
	quiet := slog.New(slog.DiscardHandler)
	newBus := func(name string) *natsbus.NATS {
		n, err := natsbus.New(context.Background(), natsbus.Config{URL: srv.URL(), Name: name, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { n.Close() })
		return n
	}

	var mu sync.Mutex
	calls := map[int64]int{}
	h := func(ctx context.Context, e *consumers.Event) error {
		mu.Lock()
		calls[e.JobID]++
		mu.Unlock()
		time.Sleep(perJob) // a slow but healthy handler
		return nil
	}
	svc, err := consumers.New(consumers.Config{
		Pool: p.pool(t, schema.WorkerRole, 8), Subscriber: newBus("consumer"),
		Handlers: []consumers.Handler{{Name: "slow", Func: h, Concurrency: 1, MaxAttempts: 2}},
		WorkerID: "w1", LeaseExtend: time.Second, AliveInterval: 100 * time.Millisecond, Logger: quiet,
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

	if _, err := p.admin.Exec(context.Background(), `INSERT INTO webhook_ingress.events
		(provider, scheme, external_event_id, event_type, raw_body, signature_verified)
		SELECT 'stripe', 'stripe', 'evt_slow_' || g, 'x', '{}', true FROM generate_series(1, $1) g`, jobs); err != nil {
		t.Fatal(err)
	}

	p.bus = newBus("streamer")
	// The pace is read from the recent past, and a loaded machine (CI)
	// slows the handler in between: half a lease of margin.
	cfg.ID, cfg.LeaseDuration, cfg.PollInterval, cfg.ReapInterval = "s1", lease, 50*time.Millisecond, 100*time.Millisecond
	p.startStreamer(t, cfg)

	testwait.Eventually(t, 90*time.Second, "every job finished", func() (bool, string) {
		var open int
		err := p.admin.QueryRow(context.Background(), `SELECT count(*) FROM webhook_ingress.jobs
			WHERE handler = 'slow' AND status NOT IN ('completed', 'dead_letter')`).Scan(&open)
		return err == nil && open == 0, fmt.Sprintf("%d open (%v)", open, err)
	})
	rows, err := p.admin.Query(context.Background(), `SELECT id, status, coalesce(last_error_class, '') FROM webhook_ingress.jobs
		WHERE handler = 'slow' AND status <> 'completed' ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var dead, neverRan int
	var sample []string
	for rows.Next() {
		var id int64
		var status, class string
		if err := rows.Scan(&id, &status, &class); err != nil {
			t.Fatal(err)
		}
		dead++
		mu.Lock()
		n := calls[id]
		mu.Unlock()
		if n == 0 {
			neverRan++
		}
		if len(sample) < 5 {
			sample = append(sample, fmt.Sprintf("job %d %s (%s) after %d handler calls", id, status, class, n))
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if dead > 0 {
		t.Fatalf("%d of %d jobs of a healthy handler (never returned an error) were not completed, %d of them without the handler ever being called; e.g. %v",
			dead, jobs, neverRan, sample)
	}
	var expired int
	if err := p.admin.QueryRow(context.Background(), `SELECT count(*) FROM webhook_ingress.job_attempts a
		JOIN webhook_ingress.jobs j ON j.id = a.job_id WHERE j.handler = 'slow' AND a.error_class = 'lease_expired'`).Scan(&expired); err != nil {
		t.Fatal(err)
	}
	if expired > 0 {
		t.Fatalf("%d attempts of a healthy handler's %d jobs counted as expired leases (their references waited in the bus past their lease)", expired, jobs)
	}
}
