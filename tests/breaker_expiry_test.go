package tests

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/consumers"
	"github.com/inlet-dev/inlet/internal/testwait"
	"github.com/inlet-dev/inlet/schema"
	"github.com/inlet-dev/inlet/streamer"
)

// TestExpiredAttemptsOpenTheBreaker (review helper-273, fixed; this
// describes the code before the fix).
//
// Defect: a handler's circuit breaker counts only the outcomes a consumer
// records itself (consumers/circuit.go Service.failed, called from
// consumers/attempt.go record). An attempt that ends without an outcome (a
// poison event that hangs the handler past its Timeout while it ignores its
// context, or that crashes/OOM-kills the consumer) is closed by the
// streamer's reaper as lease_expired (schema/queries/jobs.sql
// ReapExpiredLeases), which never touches webhook_ingress.handler_limits;
// and a reset's recount (059 handler_failures_since) counts only outcomes
// 'failed' and 'dead_letter', not 'lease_expired'. So the handler whose
// every attempt dies keeps being fed, the circuit reads `closed` and
// inlet_handler_consecutive_failures 0, until every job is dead-lettered.
// docs/pipeline.md ("after that many consecutive failed attempts the
// circuit opens: the handler's jobs are not leased (they wait and spend no
// attempts)"); the project itself counts these expiries as failures
// elsewhere (dashboard failure rate, CHANGELOG: "the handler ran and never
// reported: its consumer crashed, hung or was OOM-killed in it").
// Setup: real PostgreSQL, in-process bus, one streamer (lease 2 s, reaper
// every 100 ms), one consumer; handler "hangs" with BreakerFailures 2,
// BreakerProbeInterval 1 h, MaxAttempts 4, Timeout 200 ms, that ignores its
// context (blocks until the test ends). One event.
// Expected: after 2 attempts closed as lease_expired the circuit is open;
// the job waits (pending, 2 attempts spent) for the probe an hour away.
// Observed: the circuit stayed `closed` with consecutive_failures 0 at every
// sample; the handler was called 4 times and the job dead-lettered
// (lease_expired) after 4 counted attempts, in ~8 s.
// Fixed: ReapExpiredLeases counts each expired attempt that ran (not a
// lease given back unrun) against its handler's breaker through
// 073's count_expired_attempts, as HandlerFailed counts a consumer's
// failure (+1, open at breaker_failures, an expired half-open probe opens it
// again), the streamer logs the circuit it opened, and 073's
// handler_failures_since counts 'lease_expired', so a reset keeps them
// (schema/breaker_expiry_test.go tests each case, the unrun give-back too).
func TestExpiredAttemptsOpenTheBreaker(t *testing.T) {
	p := newPipeline(t)
	ctx := context.Background()
	const handler = "hangs"

	release := make(chan struct{})
	calls := make(chan struct{}, 100)
	svc, err := consumers.New(consumers.Config{
		Pool: p.pool(t, schema.WorkerRole, 8), Subscriber: p.bus, WorkerID: "hang-1", Logger: p.quiet,
		AliveInterval: time.Second, LeaseExtend: time.Second,
		Handlers: []consumers.Handler{{Name: handler, Provider: "stripe", MaxAttempts: 4, Timeout: 200 * time.Millisecond,
			BreakerFailures: 2, BreakerProbeInterval: time.Hour,
			Func: func(context.Context, *consumers.Event) error {
				calls <- struct{}{}
				<-release // a poison event: the handler hangs, ignoring its context
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
	t.Cleanup(func() { close(release) }) // runs first: lets the hung calls return before Stop
	p.startStreamer(t, streamer.Config{ID: "s1", LeaseDuration: 2 * time.Second, PollInterval: 50 * time.Millisecond,
		ReapInterval: 100 * time.Millisecond})

	if _, err := p.admin.Exec(ctx, `INSERT INTO webhook_ingress.events
		(provider, scheme, external_event_id, event_type, raw_body, signature_verified)
		VALUES ('stripe', 'stripe', 'evt_breaker_expiry_hang', 'x', '{}', true)`); err != nil {
		t.Fatal(err)
	}

	// Wait until the breaker has seen two counted expiries, or the job is
	// over. Sample the circuit meanwhile.
	var status, circuit string
	var expired, failures int
	seen := map[string]bool{}
	testwait.Eventually(t, 90*time.Second, "two counted expiries or the job's end", func() (bool, string) {
		err := p.admin.QueryRow(ctx, `SELECT j.status::text,
				(SELECT count(*) FROM webhook_ingress.job_attempts a WHERE a.job_id = j.id AND a.outcome = 'lease_expired'),
				l.circuit::text, l.consecutive_failures
			FROM webhook_ingress.jobs j JOIN webhook_ingress.handler_limits l ON l.handler = j.handler
			WHERE j.handler = $1`, handler).Scan(&status, &expired, &circuit, &failures)
		if err != nil {
			return false, err.Error()
		}
		seen[circuit] = true
		return status == "dead_letter" || (expired >= 2 && status != "leased"),
			fmt.Sprintf("job %s, %d lease_expired attempts, circuit %s, %d consecutive failures", status, expired, circuit, failures)
	})
	// The fixed reaper opens the circuit in the statement that closes the
	// second expiry; give a lagging write some room anyway.
	deadline := time.Now().Add(5 * time.Second)
	for circuit == "closed" && status != "dead_letter" && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
		if err := p.admin.QueryRow(ctx, `SELECT j.status::text, l.circuit::text, l.consecutive_failures
			FROM webhook_ingress.jobs j JOIN webhook_ingress.handler_limits l ON l.handler = j.handler
			WHERE j.handler = $1`, handler).Scan(&status, &circuit, &failures); err != nil {
			t.Fatal(err)
		}
		seen[circuit] = true
	}
	t.Logf("job %s, %d lease_expired attempts, %d handler calls, circuit %s (states seen %v), %d consecutive failures",
		status, expired, len(calls), circuit, seen, failures)
	if status == "dead_letter" || circuit == "closed" {
		t.Fatalf("a handler whose every attempt hangs past its Timeout (%d attempts closed as lease_expired, %d handler calls, "+
			"job %s): circuit %s with %d consecutive failures (states seen %v); want the circuit open after BreakerFailures=2 "+
			"such attempts and the job waiting for its probe", expired, len(calls), status, circuit, failures, seen)
	}
}

// TestReopenedHalfOpenCircuitLeasesNoSecondProbe (review helper-273, fixed;
// this describes the code before the fix).
//
// Defect: a half-open circuit is meant to run one probe at a time
// (CHANGELOG, 041: "a half-open circuit runs one probe at a time (it leased
// one every interval while the last still ran)"; docs/pipeline.md "one probe
// job is leased every interval (circuit half_open)"). But the jobs leased
// before the circuit opened still run (documented), and when one of them
// fails while the probe runs, HandlerFailed (schema/queries/limits.sql)
// turns half_open back to open with a new next_probe_at; claim_limited_jobs
// (schema/migrations/041_breaker_fixes.up.sql) refuses a probe while jobs are
// leased only when the circuit is half_open (`NOT (l.circuit = 'half_open'
// AND v_leased > 0)`), so once the interval passes a second probe is leased
// while the first still runs, and a third after the next late failure: the
// very case 041 fixed (a slow downstream, whose many in-flight attempts fail
// one by one as they time out, gets probe after probe at once).
// Setup: real PostgreSQL, in-process bus, one streamer, one consumer;
// handler "slowdown" with BreakerFailures 1, BreakerProbeInterval 1 s,
// retries an hour away; each call waits for the test to fail it. Jobs J1
// and J2 are leased and running; J1 fails (circuit open); J3..J5 are
// inserted; the probe J3 is leased (half_open); then J2, leased before the
// circuit opened, fails (circuit open again).
// Expected: no other job is leased while the probe J3 still runs.
// Observed: ~1 s after J2's failure a second probe (J4) was leased and
// called while J3 still ran (2 probes running at once, circuit half_open).
// Fixed: 073's claim_limited_jobs leases a probe only when none of the
// handler's jobs is leased, whatever the circuit: the jobs leased before it
// opened end before the first probe, and a probe runs alone.
func TestReopenedHalfOpenCircuitLeasesNoSecondProbe(t *testing.T) {
	p := newPipeline(t)
	ctx := context.Background()
	const handler = "slowdown"

	release := make(chan struct{})
	started := make(chan string, 100)
	var mu sync.Mutex
	gates := map[string]chan error{}
	gate := func(id string) chan error {
		mu.Lock()
		defer mu.Unlock()
		if gates[id] == nil {
			gates[id] = make(chan error, 1)
		}
		return gates[id]
	}
	svc, err := consumers.New(consumers.Config{
		Pool: p.pool(t, schema.WorkerRole, 8), Subscriber: p.bus, WorkerID: "slow-1", Logger: p.quiet,
		Handlers: []consumers.Handler{{Name: handler, Provider: "stripe", MaxAttempts: 10, Timeout: 5 * time.Minute,
			BreakerFailures: 1, BreakerProbeInterval: time.Second,
			Backoff: func(int) time.Duration { return time.Hour },
			Func: func(_ context.Context, e *consumers.Event) error {
				started <- e.ExternalID
				select {
				case err := <-gate(e.ExternalID):
					return err
				case <-release:
					return errors.New("test over")
				}
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
	t.Cleanup(func() { close(release) })
	p.startStreamer(t, streamer.Config{ID: "s1", LeaseDuration: time.Minute, PollInterval: 50 * time.Millisecond,
		ReapInterval: 100 * time.Millisecond})

	insert := func(id string) {
		t.Helper()
		if _, err := p.admin.Exec(ctx, `INSERT INTO webhook_ingress.events
			(provider, scheme, external_event_id, event_type, raw_body, signature_verified)
			VALUES ('stripe', 'stripe', $1, 'x', '{}', true)`, id); err != nil {
			t.Fatal(err)
		}
	}
	circuit := func() string {
		t.Helper()
		var c string
		if err := p.admin.QueryRow(ctx, `SELECT circuit::text FROM webhook_ingress.handler_limits WHERE handler = $1`, handler).Scan(&c); err != nil {
			t.Fatal(err)
		}
		return c
	}
	waitCircuit := func(want string) {
		t.Helper()
		testwait.Eventually(t, 30*time.Second, "circuit "+want, func() (bool, string) {
			c := circuit()
			return c == want, "circuit " + c
		})
	}
	next := func(within time.Duration) (string, bool) {
		select {
		case id := <-started:
			return id, true
		case <-time.After(within):
			return "", false
		}
	}

	// J1 and J2 run; J1's failure opens the circuit.
	insert("j1")
	insert("j2")
	running := map[string]bool{}
	for len(running) < 2 {
		id, ok := next(30 * time.Second)
		if !ok {
			t.Fatalf("J1 and J2 not both called (called: %v)", running)
		}
		running[id] = true
	}
	gate("j1") <- errors.New("downstream down")
	waitCircuit("open")
	insert("j3")
	insert("j4")
	insert("j5")

	// Every call from here on is a probe (the circuit never closes: nothing
	// succeeds). Wait for the first; a claim that waits for J2 to end
	// before probing is fine too, then J2 is failed first.
	j2Failed := false
	probe, ok := next(10 * time.Second)
	if !ok {
		gate("j2") <- errors.New("downstream down")
		j2Failed = true
		if probe, ok = next(30 * time.Second); !ok {
			t.Fatalf("no probe within 30 s of the circuit opening (circuit %s)", circuit())
		}
	}
	t.Logf("first probe %s called, circuit %s", probe, circuit())
	if !j2Failed {
		// J2, leased before the circuit opened, fails while the probe runs.
		gate("j2") <- errors.New("downstream down")
		waitCircuit("open")
	}
	// The first probe still runs: no other job may be leased now.
	if second, ok := next(10 * time.Second); ok {
		var leased int
		if err := p.admin.QueryRow(ctx, `SELECT count(*) FROM webhook_ingress.jobs WHERE handler = $1 AND status = 'leased'`, handler).Scan(&leased); err != nil {
			t.Fatal(err)
		}
		t.Fatalf("a second probe (%s) was leased and called while the first (%s) still runs: %d jobs of the handler leased, circuit %s; "+
			"want one probe at a time", second, probe, leased, circuit())
	}
}
