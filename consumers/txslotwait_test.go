package consumers_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/consumers"
	"github.com/inlet-dev/inlet/consumers/internal/consumertest"
)

// A wait for a transaction's connection behind a stuck handler is bounded:
// the waiting attempts fail (class transaction) and are retried.
//
// Regression test (review helper-132; fixed: the text describes the
// behaviour before the fix). In commit 3be5952 an attempt of a
// transactional handler waiting for a transaction slot has its lease extended
// without any bound, so when the slot is held by a handler that ignores its
// context (the case helper-130 designed for: "its lease is left to run out,
// and the reaper takes the job back ... as for a consumer that died"), every
// job queued behind it on this consumer is held 'leased' for good: never
// run, never reaped, never completed nor dead-lettered (DESIGN.md: "every job
// ends completed or dead-lettered"). The stuck job itself is reaped, and its
// retry joins the queue and is held for good too.
//
// Cause: attempt.go extendLease gives up only when handlerDeadline != 0
// (attempt.go ~line 482), and handlerDeadline is stored by runTx only AFTER
// the wait for s.txSlots (tx.go ~line 102-119). Before 3be5952 the give-up
// instant was fixed when the attempt started (Timeout + LeaseExtend), which
// bounded the wait as well.
//
// Here: pool of 3 (one transaction slot), Concurrency 2, Timeout 1 s,
// LeaseExtend 600 ms, MaxAttempts 1 (was 2: each wait now takes up to the
// bound, 43 s here). The first run ever blocks ignoring its context; every
// other run returns at once. Within the bound both jobs should
// reach a final state (the stuck one dead-lettered after its retry could not
// run either, the other one likewise, or completed elsewhere); instead job 2
// stays 'leased' on attempt 1 with its lease pushed out every 200 ms.
//
// Expected: a wait for a transaction slot is bounded too (e.g. by the time
// an honest queue can take: (Timeout + LeaseExtend) × ceil(Concurrency /
// slots)), after which the lease is no longer extended (or the job is given
// back), so the reaper takes it back as for a stuck handler.
func TestTxSlotWaitBehindAStuckHandlerIsBounded(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pool := b.workerPool(t, 3) // one transaction slot

	release := make(chan struct{})
	var runs, stuck atomic.Int32
	cfg := b.config(consumers.Handler{Name: "ledger", MaxAttempts: 1, Concurrency: 2, Backoff: noBackoff, Timeout: time.Second,
		TxOptions: pgx.TxOptions{IsoLevel: pgx.ReadCommitted},
		TxFunc: func(ctx context.Context, tx pgx.Tx, e *consumers.Event) error {
			runs.Add(1)
			if stuck.Add(1) == 1 {
				<-release // ignores its context (a wedged library call)
			}
			return nil
		}})
	cfg.Pool = pool
	cfg.LeaseExtend = 600 * time.Millisecond
	b.start(t, cfg)
	t.Cleanup(func() { close(release) }) // runs before the service's Stop

	j1 := b.JobID(t, b.InsertEvent(t, consumertest.EventParams{}), "ledger")
	j2 := b.JobID(t, b.InsertEvent(t, consumertest.EventParams{}), "ledger")
	b.StartStreamer(t, consumertest.StreamerOptions{Lease: time.Second})

	final := func(j consumertest.Job) bool { return j.Status == "completed" || j.Status == "dead_letter" }
	// The bound: (Timeout 1 s + recordTimeout 15 s + giveBackTimeout 5 s +
	// LeaseExtend 0.6 s) × 2 attempts ahead, 43.2 s; then a lease and a
	// reap.
	deadline := time.Now().Add(60 * time.Second)
	var a, c consumertest.Job
	for time.Now().Before(deadline) {
		a, c = b.Job(t, j1), b.Job(t, j2)
		if final(a) && final(c) {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	for _, j := range []struct {
		id  int64
		job consumertest.Job
	}{{j1, a}, {j2, c}} {
		if !final(j.job) {
			t.Errorf("job %d: still %s after 60 s (attempt %d of %d, lease until %v), handler ran %d times in all; "+
				"want it reaped and ended (completed or dead_letter): the only transaction slot is held by a handler whose own lease was given up",
				j.id, j.job.Status, j.job.AttemptCount, j.job.MaxAttempts, j.job.LeaseExpiresAt, runs.Load())
		}
	}
}
