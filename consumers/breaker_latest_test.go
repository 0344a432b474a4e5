package consumers_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/consumers"
	"github.com/inlet-dev/inlet/consumers/bus"
	"github.com/inlet-dev/inlet/consumers/internal/consumertest"
	"github.com/inlet-dev/inlet/internal/testwait"
	"github.com/inlet-dev/inlet/schema/queries"
)

// A success whose reset lands after a newer success's reset does not undo
// it: the breaker counts failures since the handler's newest success.
//
// Regression test (review helper-123; fixed: the text describes the
// behaviour before the fix; 056's last_success_at). The breaker reset (consumers/circuit.go reset →
// HandlerSucceeded, schema/queries/limits.sql) sets consecutive_failures to the
// failures recorded since the completed_at of the success it was handed, not
// since the handler's newest success. A transactional handler's completed_at
// is its transaction's START (complete_jobs uses now()), and successes reach
// succeeded() in COMMIT order, so a long TxFunc attempt that began before a
// run of failures and committed after a later success (a probe) brings back
// every failure that the later success had forgiven. The same happens with two
// consumer replicas (each resets with its own success), and with coalescing
// (succeeded sets breaker.latest in call order, not completed_at order).
//
// Here (breaker_failures 3, all in one real consumer service): TxFunc attempt
// A begins and blocks; attempts F1..F3 fail (circuit opens); attempt P
// succeeds (circuit closes, 0 failures); A is released and commits. Nothing
// failed after P, the handler's newest success.
//
// Expected: consecutive_failures stays 0 (and a single later failure leaves
// the circuit closed: it takes breaker_failures consecutive failures to open).
// Before: A's reset set consecutive_failures to 3 (F1..F3, all before P), so
// the next single failure opens the circuit again.
func TestBreakerOlderSuccessDoesNotUndoANewer(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()

	var aJob, pJob int64
	aStarted := make(chan struct{})
	releaseA := make(chan struct{})
	cfg := b.config(consumers.Handler{
		Name: "h", Provider: "ph", Concurrency: 8, MaxAttempts: 5,
		BreakerFailures: 3, BreakerProbeInterval: time.Hour,
		Backoff: func(int) time.Duration { return time.Hour },
		TxFunc: func(ctx context.Context, _ pgx.Tx, e *consumers.Event) error {
			switch e.JobID {
			case aJob:
				close(aStarted) // its transaction has begun: completed_at will be now
				select {
				case <-releaseA:
				case <-ctx.Done():
					return ctx.Err()
				}
				return nil
			case pJob:
				return nil
			default:
				return errors.New("h's endpoint is down")
			}
		},
	})
	svc := b.start(t, cfg)

	aJob = b.JobID(t, b.InsertEvent(t, consumertest.EventParams{Provider: "ph"}), "h")
	var fJobs []int64
	for range 3 {
		fJobs = append(fJobs, b.JobID(t, b.InsertEvent(t, consumertest.EventParams{Provider: "ph"}), "h"))
	}
	pJob = b.JobID(t, b.InsertEvent(t, consumertest.EventParams{Provider: "ph"}), "h")

	// Lease all five as a streamer does (h is limited: its breaker).
	refs := map[int64]bus.Ref{}
	if err := consumertest.AsRole(ctx, b.Admin, "webhook_streamer", func(tx pgx.Tx) error {
		q := queries.New(tx)
		if err := q.LockHandlerLimits(ctx, "h"); err != nil {
			return err
		}
		rows, err := q.ClaimLimitedJobs(ctx, queries.ClaimLimitedJobsParams{Handler: "h", BatchSize: 100, LeaseHolder: "test-streamer", LeaseFor: time.Hour})
		for _, j := range rows {
			refs[j.ID] = bus.Ref{JobID: j.ID, EventID: j.EventID, Handler: j.Handler, Provider: j.Provider, EventType: j.EventType,
				Attempt: int(j.AttemptCount), LeaseExpiresAt: j.LeaseExpiresAt, EventReceivedAt: j.EventReceivedAt, LeasedAt: j.AttemptedAt}
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if len(refs) != 5 {
		t.Fatalf("leased %d of h's 5 jobs", len(refs))
	}
	state := func() (circuit string, n int) {
		t.Helper()
		if err := b.Admin.QueryRow(ctx, `SELECT circuit, consecutive_failures FROM webhook_ingress.handler_limits WHERE handler = 'h'`).Scan(&circuit, &n); err != nil {
			t.Fatal(err)
		}
		return circuit, n
	}

	// A's transaction begins and waits.
	if err := b.Publish(refs[aJob]); err != nil {
		t.Fatal(err)
	}
	select {
	case <-aStarted:
	case <-time.After(wait):
		t.Fatal("A's handler did not start")
	}
	time.Sleep(20 * time.Millisecond) // F1's transaction begins strictly after A's

	// Three failures: the circuit opens.
	for _, id := range fJobs {
		if err := b.Publish(refs[id]); err != nil {
			t.Fatal(err)
		}
		b.WaitJobStatus(t, id, "failed", wait)
	}
	if c, n := state(); c != "open" || n != 3 {
		t.Fatalf("after 3 failures: circuit %s, %d failures; want open, 3", c, n)
	}

	// P succeeds: the circuit closes, nothing failed since.
	if err := b.Publish(refs[pJob]); err != nil {
		t.Fatal(err)
	}
	b.WaitJobStatus(t, pJob, "completed", wait)
	testwait.Eventually(t, wait, "P's reset", func() (bool, string) {
		c, n := state()
		return c == "closed" && n == 0, c
	})

	// A commits now (its success began before F1..F3).
	close(releaseA)
	b.WaitJobStatus(t, aJob, "completed", wait)
	// Stop waits for the resets still running.
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := svc.Stop(sctx); err != nil {
		t.Fatal(err)
	}

	c, n := state()
	if n != 0 {
		t.Errorf("after h's newest success (P) and no failure since: consecutive_failures %d, circuit %s; want 0 "+
			"(A's late reset counted F1..F3, which failed before P)", n, c)
	}

	// One more failure, recorded as the consumer does (FailJob, InsertAttempt,
	// HandlerFailed in one transaction): with breaker_failures 3 the circuit
	// must stay closed.
	dJob := b.JobID(t, b.InsertEvent(t, consumertest.EventParams{Provider: "ph"}), "h")
	// The service has stopped: a consumer of h alive again (its liveness
	// row), since a limited claim leases only jobs a live consumer could
	// receive (076).
	if _, err := b.Admin.Exec(ctx, `UPDATE webhook_ingress.consumers SET alive_until = now() + interval '1 hour'
		WHERE handler = 'h'`); err != nil {
		t.Fatal(err)
	}
	var dRow queries.ClaimLimitedJobsRow
	if err := consumertest.AsRole(ctx, b.Admin, "webhook_streamer", func(tx pgx.Tx) error {
		q := queries.New(tx)
		if err := q.LockHandlerLimits(ctx, "h"); err != nil {
			return err
		}
		rows, err := q.ClaimLimitedJobs(ctx, queries.ClaimLimitedJobsParams{Handler: "h", BatchSize: 1, LeaseHolder: "test-streamer", LeaseFor: time.Hour})
		if err == nil && (len(rows) != 1 || rows[0].ID != dJob) {
			err = errors.New("job D not leased (the circuit is not closed?)")
		}
		if err == nil {
			dRow = rows[0]
		}
		return err
	}); err != nil {
		t.Fatalf("lease job D: %v (circuit %s, %d failures)", err, c, n)
	}
	worker, class, text := "test-worker", "http_5xx", "down again"
	if err := consumertest.AsRole(ctx, b.Admin, "webhook_worker", func(tx pgx.Tx) error {
		q := queries.New(tx)
		if _, err := q.FailJob(ctx, queries.FailJobParams{ID: dRow.ID, AttemptCount: dRow.AttemptCount, LastError: &text, LastErrorClass: &class,
			Column5: time.Hour, AttemptedAt: &dRow.AttemptedAt, WorkerID: &worker}); err != nil {
			return err
		}
		if _, err := q.InsertAttempt(ctx, queries.InsertAttemptParams{ID: dRow.ID, Attempt: dRow.AttemptCount, WorkerID: &worker,
			StartedAt: dRow.AttemptedAt, Outcome: "failed", ErrorClass: &class, Error: &text}); err != nil {
			return err
		}
		_, err := q.HandlerFailed(ctx, "h")
		return err
	}); err != nil {
		t.Fatalf("record D's failure: %v", err)
	}
	if c, n := state(); c != "closed" {
		t.Errorf("one failure after h's newest success opened its circuit (breaker_failures 3): circuit %s, %d consecutive failures; "+
			"want closed, 1", c, n)
	}
}
