package tests

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/consumers"
	"github.com/inlet-dev/inlet/consumers/bus/natsbus"
	"github.com/inlet-dev/inlet/internal/natstest"
	"github.com/inlet-dev/inlet/schema"
	"github.com/inlet-dev/inlet/streamer"
)

// TestLockstepHandlerEndsReadAsSpike (review helper-187, fixed; this
// describes the code before the fix).
//
// Defect: a handler whose jobs end in bursts (concurrency C, jobs of about
// the same length T: the C attempts a backlog starts together end together,
// and the next C start together) is read at C jobs per recount interval,
// many times its real pace, whenever T is a little over paceMaxWindow
// (2 s). handlerPace.note (streamer/inflight.go:141-148) reads a window
// once it is 2 s long whatever it holds: the window in which nobody ended
// (the C attempts still running) is read as 0 jobs/s and a NEW window
// starts just before the burst; the burst's C ends then land in a window
// of 100–200 ms, which holds paceEnds (4) ends and is paceWindow long, and
// is read as C/0.1 s, taken "up at once". Concurrency 4 × 2.1 s (1.9
// jobs/s) reads 40 jobs/s, every cycle (the phase repeats: each burst
// lands 100 ms after a 2 s window closed empty). capOf then gives the
// handler 40 × lease/2 unextended references instead of 1.9 × lease/2:
// with a 6 s lease 120 instead of 5, i.e. ~60 s of its work waiting in the
// bus behind a 6 s lease. The references expire unrun, the reaper (the
// consumer alive) counts each as an attempt (lease_expired), and with
// max_attempts 2 the jobs end in the dead letters without their handler
// ever being called: exactly what docs/pipeline.md step 2 promises the
// pace prevents ("held to what the handler's consumers start in half a
// lease at the pace its leases ended lately"; tests/queuedlease_test.go).
// The same happens with completions that arrive together for any other
// reason (CompleteBatch of a message's jobs, a consumer's commit batch):
// a window is as short as the gap since the last reading, not as long as
// the spacing of the ends it holds.
//
// Expected: a healthy handler (never fails) running 1.9 jobs/s has no
// attempt counted as lease_expired and no job dead-lettered; its
// unextended leases stay near half a lease of its work (~5, floor 4).
// Actual: ~100 references leased at once after the first burst; dozens of
// lease_expired attempts for jobs the handler never ran.
func TestLockstepHandlerEndsReadAsSpike(t *testing.T) {
	const (
		jobs        = 100
		concurrency = 4
		perJob      = 2100 * time.Millisecond // a little over paceMaxWindow
		lease       = 6 * time.Second
	)
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
		time.Sleep(perJob) // a downstream call of ~2.1 s: slow but healthy
		return nil
	}
	svc, err := consumers.New(consumers.Config{
		Pool: p.pool(t, schema.WorkerRole, 8), Subscriber: newBus("consumer"),
		Handlers: []consumers.Handler{{Name: "lockstep", Func: h, Concurrency: concurrency, MaxAttempts: 2}},
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
		SELECT 'stripe', 'stripe', 'evt_lockstep_' || g, 'x', '{}', true FROM generate_series(1, $1) g`, jobs); err != nil {
		t.Fatal(err)
	}
	p.bus = newBus("streamer")
	p.startStreamer(t, streamer.Config{ID: "s1", LeaseDuration: lease, PollInterval: 50 * time.Millisecond, ReapInterval: 100 * time.Millisecond})

	ctx := context.Background()
	peakUnext := 0
	deadline := time.Now().Add(25 * time.Second)
	var expired, dead, completed int
	for time.Now().Before(deadline) {
		var unext int
		if err := p.admin.QueryRow(ctx, `SELECT
			count(*) FILTER (WHERE status = 'leased' AND worker_id IS NULL),
			count(*) FILTER (WHERE status = 'dead_letter'),
			count(*) FILTER (WHERE status = 'completed'),
			(SELECT count(*) FROM webhook_ingress.job_attempts a WHERE a.job_id IN (SELECT id FROM webhook_ingress.jobs WHERE handler = 'lockstep') AND a.error_class = 'lease_expired')
			FROM webhook_ingress.jobs WHERE handler = 'lockstep'`).Scan(&unext, &dead, &completed, &expired); err != nil {
			t.Fatal(err)
		}
		peakUnext = max(peakUnext, unext)
		if expired > 0 {
			time.Sleep(2 * time.Second) // let a few more show
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	rows, err := p.admin.Query(ctx, `SELECT DISTINCT a.job_id FROM webhook_ingress.job_attempts a
		JOIN webhook_ingress.jobs j ON j.id = a.job_id WHERE j.handler = 'lockstep' AND a.error_class = 'lease_expired'`)
	if err != nil {
		t.Fatal(err)
	}
	var expiredJobs []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		expiredJobs = append(expiredJobs, id)
	}
	rows.Close()
	neverRan := 0
	mu.Lock()
	for _, id := range expiredJobs {
		if calls[id] == 0 {
			neverRan++
		}
	}
	mu.Unlock()
	if err := p.admin.QueryRow(ctx, `SELECT count(*) FILTER (WHERE status = 'dead_letter'),
		(SELECT count(*) FROM webhook_ingress.job_attempts a JOIN webhook_ingress.jobs j2 ON j2.id = a.job_id WHERE j2.handler = 'lockstep' AND a.error_class = 'lease_expired')
		FROM webhook_ingress.jobs WHERE handler = 'lockstep'`).Scan(&dead, &expired); err != nil {
		t.Fatal(err)
	}
	t.Logf("peak unextended leases %d; %d completed; %d lease_expired attempts on %d jobs (%d never run); %d dead letters",
		peakUnext, completed, expired, len(expiredJobs), neverRan, dead)
	if expired > 0 || dead > 0 {
		t.Fatalf("a healthy handler of %d × %s (%.1f jobs/s) with a %s lease: %d references leased unextended at once "+
			"(half a lease at its pace is ~%d), %d attempts counted as lease_expired on %d jobs (%d never run by the handler), %d dead-lettered; "+
			"want none: its ends arrive %d at a time and a window of ~100 ms after an empty 2 s one reads them as %d/0.1 s",
			concurrency, perJob, float64(concurrency)/perJob.Seconds(), lease, peakUnext,
			int(float64(concurrency)/perJob.Seconds()*lease.Seconds()/2), expired, len(expiredJobs), neverRan, dead, concurrency, concurrency)
	}
}
