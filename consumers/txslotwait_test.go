package consumers_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/consumers"
	"github.com/inlet-dev/inlet/consumers/internal/consumertest"
)

// A wait for a transaction's connection behind a stuck handler is bounded:
// the waiting attempts are given back, uncounted, and run once the slot is
// free.
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
//
// Updated for reviews helper-137 and helper-151: past the bound the
// waiting attempt fails, class transaction, as before, because the slot is
// held by its own handler's stuck attempt (here: MaxAttempts 1, so its job
// is dead-lettered): a handler's own fault ends its jobs. Held back by
// another handler's transaction, it would be given back uncounted
// (TestTxWaitDeadLettersAnotherHandlersUnrunJob); given back here, the hung
// handler's job was leased again for ever (TestHungTxHandlersOwnJobCyclesForever).
// LeaseExtend is 1 s (the bound 44 s): at 600 ms a stalled extension on a
// loaded machine could let the waiting job's lease run out, and the reaper
// would count it as lease_expired instead.
func TestTxSlotWaitBehindAStuckHandlerIsBounded(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pool := b.workerPool(t, 3) // one transaction slot

	release := make(chan struct{})
	releaseStuck := sync.OnceFunc(func() { close(release) })
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
	cfg.LeaseExtend = time.Second
	b.start(t, cfg)
	t.Cleanup(releaseStuck) // runs before the service's Stop

	j1 := b.JobID(t, b.InsertEvent(t, consumertest.EventParams{}), "ledger")
	j2 := b.JobID(t, b.InsertEvent(t, consumertest.EventParams{}), "ledger")
	b.StartStreamer(t, consumertest.StreamerOptions{Lease: time.Second})

	// The bound: (Timeout 1 s + recordTimeout 15 s + giveBackTimeout 5 s +
	// LeaseExtend 1 s) × 2 attempts ahead, 44 s; the stuck job is reaped
	// within a lease or so of its Timeout.
	var stuckJob, waiting int64
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) && stuckJob == 0 {
		for _, p := range [][2]int64{{j1, j2}, {j2, j1}} {
			if b.Job(t, p[0]).Status == "dead_letter" {
				stuckJob, waiting = p[0], p[1]
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	if stuckJob == 0 {
		t.Fatalf("after 60 s neither job was reaped and dead-lettered (%s, %s); handler ran %d times",
			b.Job(t, j1).Status, b.Job(t, j2).Status, runs.Load())
	}
	if j := b.Job(t, stuckJob); deref(j.LastErrorClass) != "lease_expired" {
		t.Errorf("stuck job %d: dead_letter class %s, want lease_expired (reaped)", stuckJob, deref(j.LastErrorClass))
	}
	// Not held leased for good: failed at the bound, its own handler's
	// transaction holding the slot.
	j := b.WaitJobStatus(t, waiting, "dead_letter", 60*time.Second)
	if deref(j.LastErrorClass) != "transaction" || !strings.Contains(deref(j.LastError), "its own transactions held them") {
		t.Errorf("waiting job %d: dead_letter class %s (%s), want class transaction: its own handler held the slot", waiting, deref(j.LastErrorClass), deref(j.LastError))
	}
}
