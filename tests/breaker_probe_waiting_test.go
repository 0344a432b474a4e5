package tests

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/consumers"
	"github.com/inlet-dev/inlet/internal/testwait"
	"github.com/inlet-dev/inlet/schema"
	"github.com/inlet-dev/inlet/streamer"
)

// TestBreakerProbeNotHeldBehindAReferenceWaitingForAHungSlot (review
// helper-283, fixed).
// Defect: since 073 claim_limited_jobs (schema/migrations/
// 073_breaker_counts_expiry.up.sql) leases a probe only while none of the
// handler's jobs is leased, whatever the circuit. But a reference waiting in
// a consumer for a concurrency slot keeps its lease extended for as long as
// it waits (consumers/service.go Service.waitForSlot / extendWaiting, with
// no bound), and the slot may be held for good by the very handler that
// opened the circuit: a poison event that hangs its handler past Timeout,
// ignoring its context, the case 073 was written for (CHANGELOG: "a poison
// event hanging or killing its consumer opens it"). Then the handler's
// circuit stays open with its probe overdue for ever: every replica of the
// handler, healthy ones included, is fed nothing until the hung process is
// restarted. Before 073 an open circuit leased its probe at its time
// (only half_open waited for leased jobs), so a healthy replica ran it and
// closed the circuit. docs/pipeline.md: "one probe job is leased every
// interval (circuit half_open) once none of its jobs is leased".
// Setup: real PostgreSQL, in-process bus, one streamer (lease 2 s, reaper
// every 100 ms). Consumer r1 runs handler "stuck" with Concurrency 1,
// Timeout 3 s, BreakerFailures 1, BreakerProbeInterval 1 s; its handler
// hangs on event "poison" (ignoring its context). "poison" runs on r1 and
// hangs; "j2" is leased and its reference waits in r1 for the slot. The
// poison attempt's lease runs out and the reaper opens the circuit. Then a
// healthy replica r2 of the same handler starts and "j3" arrives.
// Expected: within seconds of next_probe_at a probe is leased (circuit
// half_open) and the healthy replica r2 runs it.
// Observed: 25 s after the probe was due the circuit is still open,
// next_probe_at long past, j2 still leased (r1 keeps extending it while it
// waits for the hung slot), poison and j3 pending, r2 never called.
// Fixed: a reference waiting for a slot is given back, uncounted and no
// breaker failure (GiveBackAttempt), once it has waited the handler's
// Timeout and a LeaseExtend (slotWaitBound) and every slot is held by an
// attempt whose handler has run a LeaseExtend past its Timeout, the point
// where extendLease already gives that attempt's lease up
// (consumers/service.go runner.slotsHung, waitForSlot, giveBackHung); a
// slow handler that returns frees its slot in time, so its backlog is
// never given back.
func TestBreakerProbeNotHeldBehindAReferenceWaitingForAHungSlot(t *testing.T) {
	p := newPipeline(t)
	ctx := context.Background()
	const handler = "stuck"

	release := make(chan struct{})
	r1Calls := make(chan string, 100)
	r2Calls := make(chan string, 100)
	newSvc := func(worker string, calls chan string, hang bool) *consumers.Service {
		svc, err := consumers.New(consumers.Config{
			Pool: p.pool(t, schema.WorkerRole, 8), Subscriber: p.bus, WorkerID: worker, Logger: p.quiet,
			AliveInterval: time.Second, LeaseExtend: time.Second,
			Handlers: []consumers.Handler{{Name: handler, Provider: "stripe", MaxAttempts: 10, Timeout: 3 * time.Second,
				Concurrency: 1, BreakerFailures: 1, BreakerProbeInterval: time.Second,
				Backoff: func(int) time.Duration { return time.Hour },
				Func: func(_ context.Context, e *consumers.Event) error {
					calls <- e.ExternalID
					if hang && e.ExternalID == "poison" {
						<-release // hangs, ignoring its context
					}
					return nil
				}}},
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := svc.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = svc.Stop(sctx)
		})
		return svc
	}
	newSvc("r1", r1Calls, true)
	t.Cleanup(func() { close(release) }) // runs before Stop: the hung call returns
	p.startStreamer(t, streamer.Config{ID: "s1", LeaseDuration: 2 * time.Second, PollInterval: 50 * time.Millisecond,
		ReapInterval: 100 * time.Millisecond})

	insert := func(id string) {
		t.Helper()
		if _, err := p.admin.Exec(ctx, `INSERT INTO webhook_ingress.events
			(provider, scheme, external_event_id, event_type, raw_body, signature_verified)
			VALUES ('stripe', 'stripe', $1, 'x', '{}', true)`, id); err != nil {
			t.Fatal(err)
		}
	}
	type jobState struct {
		status  string
		worker  string
		attempt int
	}
	job := func(id string) jobState {
		t.Helper()
		var s jobState
		if err := p.admin.QueryRow(ctx, `SELECT j.status::text, coalesce(j.worker_id, ''), j.attempt_count
			FROM webhook_ingress.jobs j JOIN webhook_ingress.events e ON e.id = j.event_id
			WHERE j.handler = $1 AND e.external_event_id = $2`, handler, id).Scan(&s.status, &s.worker, &s.attempt); err != nil {
			t.Fatalf("job of %s: %v", id, err)
		}
		return s
	}
	type circuitState struct {
		circuit  string
		failures int
		overdue  float64 // seconds since next_probe_at (negative: ahead)
	}
	circuit := func() circuitState {
		t.Helper()
		var c circuitState
		if err := p.admin.QueryRow(ctx, `SELECT circuit::text, consecutive_failures,
				coalesce(extract(epoch FROM now() - next_probe_at), 0)::float8
			FROM webhook_ingress.handler_limits WHERE handler = $1`, handler).Scan(&c.circuit, &c.failures, &c.overdue); err != nil {
			t.Fatal(err)
		}
		return c
	}

	// The poison event runs on r1 and hangs its one slot.
	insert("poison")
	select {
	case id := <-r1Calls:
		if id != "poison" {
			t.Fatalf("r1 first ran %q, want poison", id)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("poison not called within 30 s")
	}
	// j2 is leased while the circuit is still closed, and its reference
	// waits in r1 for the slot: r1 extends its lease (worker_id r1).
	insert("j2")
	testwait.Eventually(t, 30*time.Second, "j2 leased and waiting in r1", func() (bool, string) {
		s := job("j2")
		return s.status == "leased" && s.worker == "r1", fmt.Sprintf("j2 %+v, circuit %+v", s, circuit())
	})
	if c := circuit(); c.circuit != "closed" {
		t.Fatalf("setup: the circuit opened (%+v) before j2's reference reached r1; lengthen the Timeout", c)
	}
	// The poison attempt's lease is no longer extended past its Timeout:
	// the reaper counts it and opens the circuit.
	testwait.Eventually(t, 60*time.Second, "circuit open after the poison attempt expired", func() (bool, string) {
		c := circuit()
		return c.circuit == "open", fmt.Sprintf("circuit %+v, poison %+v", c, job("poison"))
	})

	// A healthy replica of the handler comes up, and more work arrives.
	newSvc("r2", r2Calls, false)
	insert("j3")

	// The probe is due a second after the circuit opened; give it plenty.
	deadline := time.Now().Add(25 * time.Second)
	var c circuitState
	for {
		c = circuit()
		if c.circuit == "half_open" || len(r2Calls) > 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if c.circuit == "open" && len(r2Calls) == 0 {
		t.Fatalf("circuit still open %.1f s after its probe was due (%d consecutive failures); no probe leased: "+
			"j2 %+v (its reference waits in r1 behind the hung slot, its lease extended), poison %+v, j3 %+v; "+
			"the healthy replica r2 was called %d times; want a probe leased within seconds of next_probe_at",
			c.overdue, c.failures, job("j2"), job("poison"), job("j3"), len(r2Calls))
	}
}
