package consumers_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/consumers"
	"github.com/inlet-dev/inlet/consumers/internal/consumertest"
)

// TestTxWaitDeadLettersAnotherHandlersUnrunJob (review helper-137, fixed;
// this describes the code before the fix):
//
// When a transactional handler ignores its context (a bug of handler A),
// the transaction slots it holds stay held. Another transactional handler B
// of the same service waited txWaitBound for a slot and then runTx
// (consumers/tx.go, the `case <-wait.C:` branch) returned a failure, class
// transaction, which attempt() recorded with finish(): B's attempt was
// COUNTED (a job_attempts row, attempt_count spent, backoff) and on B's
// last attempt B's job was DEAD-LETTERED, although B's handler was never
// called. Handler A's misbehaviour spent and dead-lettered handler B's
// jobs: it broke "an attempt counted but never run / a job dead-lettered
// without its attempts having run" and guarantee 3's "handler A failing
// never retries handler B".
//
// Here: a pool of 3 (one transaction slot). A (TxFunc, Timeout 200ms)
// blocks without looking at its context. B (TxFunc, MaxAttempts 1) is
// handed one job while A holds the slot; past the bound (44 s here) B's
// only job was dead_letter, class transaction, with B called 0 times.
//
// Now: an attempt that never got a slot is not counted: its lease is given
// back uncounted (GiveBackAttempt, as for an attempt Stop cut short before
// its handler ran), logged (warn, class transaction) and counted as outcome
// given_back. B's job is due again at once with its attempts intact, is
// leased again (and waits as long again: once per bound, no busy loop), and
// runs once A's slot is free.
//
// (The review's version used LeaseExtend 300ms: on a loaded machine a
// 200 ms stall of an extension let B's lease run out, and the reaper
// counted it; 1 s keeps the test about the slot wait.)
func TestTxWaitDeadLettersAnotherHandlersUnrunJob(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pool := b.workerPool(t, 3) // one transaction slot
	release := make(chan struct{})
	releaseA := sync.OnceFunc(func() { close(release) })
	var aEntered atomic.Int32
	var bCalls atomic.Int32
	cfg := b.config(
		consumers.Handler{Name: "txa", EventType: "a.*", Concurrency: 1, Timeout: 200 * time.Millisecond, Backoff: noBackoff,
			TxOptions: pgx.TxOptions{IsoLevel: pgx.ReadCommitted},
			TxFunc: func(_ context.Context, _ pgx.Tx, _ *consumers.Event) error {
				aEntered.Add(1)
				<-release // handler A's bug: it ignores its context
				return nil
			}},
		consumers.Handler{Name: "txb", EventType: "b.*", Concurrency: 1, MaxAttempts: 1, Timeout: time.Second, Backoff: noBackoff,
			TxOptions: pgx.TxOptions{IsoLevel: pgx.ReadCommitted},
			TxFunc: func(context.Context, pgx.Tx, *consumers.Event) error {
				bCalls.Add(1)
				return nil
			}},
	)
	cfg.Pool = pool
	cfg.LeaseExtend = time.Second
	b.start(t, cfg)
	t.Cleanup(releaseA) // before Stop (cleanups run last first)
	st := b.StartStreamer(t, consumertest.StreamerOptions{Lease: 2 * time.Second})

	b.InsertEvent(t, consumertest.EventParams{EventType: "a.stuck"})
	consumertest.WaitFor(t, 10*time.Second, "handler A holds the transaction slot", func() bool { return aEntered.Load() >= 1 })
	jobB := b.JobID(t, b.InsertEvent(t, consumertest.EventParams{EventType: "b.fine"}), "txb")

	// The bound is (1 s + 15 s + 5 s + 1 s) × 2 = 44 s; look a little past it.
	var j consumertest.Job
	for end := time.Now().Add(54 * time.Second); time.Now().Before(end); time.Sleep(250 * time.Millisecond) {
		j = b.Job(t, jobB)
		if j.Status == "dead_letter" || j.Status == "completed" || j.Status == "failed" {
			break
		}
	}
	counted := 0
	var why string
	for _, a := range b.Attempts(t, jobB) {
		if a.Outcome != "completed" {
			counted++
			why += " [" + a.Outcome + " class " + deref(a.ErrorClass) + ": " + deref(a.Error) + "]"
		}
	}
	if bCalls.Load() == 0 && (counted > 0 || j.Status == "dead_letter") {
		t.Fatalf("handler B's job %d is %s with %d attempt(s) counted, yet B's handler was never called; history:%s",
			jobB, j.Status, counted, why)
	}
	// Given back, not held: the streamer leased it again.
	if n := len(st.ClaimsOf(jobB)); n < 2 {
		t.Errorf("job %d was leased %d time(s) in 54 s; want it given back at the bound and leased again", jobB, n)
	}
	b.waitLogged(t, "no transaction slot for the handler within the bound", 1)

	// Once A lets go of the slot, B's job runs, on its first attempt.
	releaseA()
	j = b.WaitJobStatus(t, jobB, "completed", 30*time.Second)
	if j.AttemptCount != 1 || bCalls.Load() != 1 {
		t.Errorf("job %d completed on attempt %d with B called %d times; want attempt 1, one call", jobB, j.AttemptCount, bCalls.Load())
	}
}
