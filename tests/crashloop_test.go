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

// TestPoisonJobThatCrashesItsConsumerEndsDeadLettered (review helper-211;
// this describes the code before the fix).
//
// Defect: a poison job that kills its consumer process every time it runs
// (a fatal runtime error, OOM kill, a cgo segfault: nothing the SDK can
// recover or record) never reaches dead_letter when the consumer's restart
// takes longer than the lease (Kubernetes' CrashLoopBackOff reaches 80 s
// after three crashes; the default lease is 60 s). ReapExpiredLeases
// (schema/queries/jobs.sql, the `ran` test of "name: ReapExpiredLeases")
// counts an expired lease only when its consumer extended it (worker_id,
// the first extension comes LeaseExtend/3 = 10 s into the attempt) or when
// some consumer row of the handler has seen_at >= the lease's attempted_at.
// A consumer says alive at Start (consumers/service.go, sayAlive after the
// subscriptions) and then every AliveInterval (5 s); the streamer leases the
// job only once that row is alive, so the lease always begins AFTER the
// crashing consumer's last liveness write, and the consumer dies before its
// next one. No row is seen after the lease began, the expiry is judged an
// outage ("no handler ran"), the attempt is given back uncounted
// (attempt_count - 1), and the job is leased again as soon as the consumer
// restarts, which it kills again: for ever, with no lease_expired history
// row to tell the operator why.
//
// This breaks DESIGN.md ("Kill any process at any moment ...: every job ends
// completed or dead-lettered") and docs/pipeline.md guarantee 4/Recovery (an
// expired lease counts "when a consumer of that handler ... was alive
// meanwhile": this consumer was alive, it ran the handler).
//
// The test models the crash in-process: the handler, once called, cuts the
// consumer off the database (its pool closed: no liveness, no extension, no
// outcome, no give-back, no ConsumerGone) and the service is stopped; the
// next incarnation (a new worker id, as after a restart with a new PID)
// starts only once the reaper has taken the lease back (a restart backoff
// longer than the lease). With max_attempts 2 the job must be dead-lettered
// (lease_expired) after the second crash; three crashes are run.
// Observed: the job is pending with attempt_count 0 after every crash, no
// job_attempts row, the handler called 3 times (and it would be for ever).
//
// Control (seen while writing this test): with the streamer's lease shorter
// than LeaseExtend/2 the SDK extends the lease as it takes the attempt
// (consumers/attempt.go take), worker_id is set and every crash counts; the
// defaults (lease 60 s, LeaseExtend 30 s) take the path tested here.
//
// Fixed: before a handler runs on a lease that began after the service's
// last liveness write (the database time ConsumerAlive returns), the
// consumer writes it once more (consumers/alive.go sayAliveSince, called by
// take; the takes waiting share one write), so the crashed attempt counts.
// This test failed before the fix (pending, attempt_count 0 after each of
// the three crashes) and passes after it.
func TestPoisonJobThatCrashesItsConsumerEndsDeadLettered(t *testing.T) {
	p := newPipeline(t)
	ctx := context.Background()
	const handler = "poison"
	const maxAttempts = 2
	p.startStreamer(t, streamer.Config{ID: "s1", LeaseDuration: 2 * time.Second, PollInterval: 50 * time.Millisecond,
		ReapInterval: 100 * time.Millisecond})

	calls := 0
	for round := 1; round <= maxAttempts+1; round++ {
		pool := p.pool(t, schema.WorkerRole, 4)
		crashed := make(chan struct{})
		svc, err := consumers.New(consumers.Config{
			Pool: pool, Subscriber: p.bus, WorkerID: fmt.Sprintf("poison-%d", round), Logger: p.quiet,
			AliveInterval: time.Second, LeaseExtend: time.Second, // lease : extension 2:1, as the defaults' 60 s : 30 s
			Handlers: []consumers.Handler{{Name: handler, Provider: "stripe", MaxAttempts: maxAttempts,
				Func: func(hctx context.Context, _ *consumers.Event) error {
					close(crashed) // the process dies here
					<-hctx.Done()
					return hctx.Err()
				}}},
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := svc.Start(ctx); err != nil {
			t.Fatal(err)
		}
		if round == 1 {
			if _, err := p.admin.Exec(ctx, `INSERT INTO webhook_ingress.events
				(provider, scheme, external_event_id, event_type, raw_body, signature_verified)
				VALUES ('stripe', 'stripe', 'evt_review_poison', 'x', '{}', true)`); err != nil {
				t.Fatal(err)
			}
		}
		select {
		case <-crashed:
		case <-time.After(30 * time.Second):
			st, n, _ := p.jobStatus(t, handler)
			t.Fatalf("round %d: the handler was not called (job %s, attempt_count %d)", round, st, n)
		}
		calls++
		// The crash: nothing of this consumer reaches the database any more.
		pool.Close()
		sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_ = svc.Stop(sctx)
		cancel()

		// The restart backoff outlasts the lease: wait until the reaper took
		// the lease back and no consumer row of the handler is alive (the
		// crashed one's liveness ran out), so nothing is leased meanwhile.
		var status string
		testwait.Eventually(t, 30*time.Second, "the crashed attempt's lease taken back", func() (bool, string) {
			var alive int
			err := p.admin.QueryRow(ctx, `SELECT j.status::text,
					(SELECT count(*) FROM webhook_ingress.consumers c WHERE c.handler = j.handler AND c.alive_until > now())
				FROM webhook_ingress.jobs j WHERE j.handler = $1`, handler).Scan(&status, &alive)
			return err == nil && status != "leased" && alive == 0, fmt.Sprintf("job %s, %d consumers alive (%v)", status, alive, err)
		})
		// Evidence: the crashed consumer's last liveness write precedes the
		// lease it died in; the attempt was given back uncounted.
		rows, err := p.admin.Query(ctx, `SELECT format('consumer %s seen_at %s alive_until %s', worker_id, seen_at, alive_until)
				FROM webhook_ingress.consumers
			UNION ALL SELECT format('job %s attempt_count %s attempted_at %s', status, attempt_count, attempted_at)
				FROM webhook_ingress.jobs`)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var line string
			if err := rows.Scan(&line); err != nil {
				t.Fatal(err)
			}
			t.Logf("after crash %d: %s", round, line)
		}
		rows.Close()
		if status == "dead_letter" {
			break
		}
	}

	status, attempts, class := p.jobStatus(t, handler)
	var history int
	if err := p.admin.QueryRow(ctx, `SELECT count(*) FROM webhook_ingress.job_attempts a
		JOIN webhook_ingress.jobs j ON j.id = a.job_id WHERE j.handler = $1`, handler).Scan(&history); err != nil {
		t.Fatal(err)
	}
	cls := "<nil>"
	if class != nil {
		cls = *class
	}
	if status != "dead_letter" || cls != "lease_expired" {
		t.Fatalf("after the poison job crashed its consumer %d times (max_attempts %d): job %s, attempt_count %d, last_error_class %s, %d history rows; want dead_letter / lease_expired after %d crashes",
			calls, maxAttempts, status, attempts, cls, history, maxAttempts)
	}
}
