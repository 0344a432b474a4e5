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

// A READ COMMITTED transactional handler that waited for its connection
// keeps its lease through its Timeout.
//
// Regression test (review helper-131; fixed: the text describes the
// behaviour before the fix). Before: a READ COMMITTED
// transactional attempt that waited for a transaction slot loses its lease
// while it runs well within its Timeout.
//
// Cause (commit 010eb79): extendLease (attempt.go ~line 469) fixes its
// give-up instant as time.Now()+Timeout+LeaseExtend when the attempt starts,
// i.e. BEFORE runTx waits for a transaction slot (tx.go ~line 99: "waiting
// for one is not the handler's time, and the lease is extended meanwhile";
// TxHandlerFunc's doc: "the others wait for a connection before their
// Timeout starts"), while the handler's own deadline is set only after the
// slot is taken (tx.go: deadline := time.Now().Add(h.Timeout)). An attempt
// that waited W > ~LeaseExtend for a slot and then runs close to its
// Timeout (honouring its context: a legitimate slow handler) is no longer
// extended: its lease runs out mid-run, the reaper takes the job back, and
// the completion is fenced out and rolled back (dead_letter with
// MaxAttempts 1; otherwise a second run of work that had succeeded).
//
// Here: pool of 3 connections (one transaction slot), Concurrency 2, two
// jobs, each handler run takes 3.5 s of its 4 s Timeout; LeaseExtend 600 ms,
// streamer lease 1 s. The second job waits ~3.5 s for the slot, runs until
// ~7 s, but its extensions stop at ~4.6 s.
// Expected: both jobs completed on attempt 1.
func TestTxSlotWaitDoesNotCountAgainstTheHandlersTimeout(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pool := b.workerPool(t, 3) // the smallest pool New accepts for a TxFunc handler: one transaction at a time

	var runs atomic.Int32
	cfg := b.config(consumers.Handler{Name: "ledger", MaxAttempts: 1, Concurrency: 2, Backoff: noBackoff, Timeout: 4 * time.Second,
		TxOptions: pgx.TxOptions{IsoLevel: pgx.ReadCommitted},
		TxFunc: func(ctx context.Context, tx pgx.Tx, e *consumers.Event) error {
			runs.Add(1)
			if _, err := tx.Exec(ctx, `SELECT 1`); err != nil {
				return err
			}
			select { // well inside its Timeout, and it honours its context
			case <-time.After(3500 * time.Millisecond):
			case <-ctx.Done():
				return ctx.Err()
			}
			return nil
		}})
	cfg.Pool = pool
	cfg.LeaseExtend = 600 * time.Millisecond
	b.start(t, cfg)

	j1 := b.JobID(t, b.InsertEvent(t, consumertest.EventParams{}), "ledger")
	j2 := b.JobID(t, b.InsertEvent(t, consumertest.EventParams{}), "ledger")
	b.StartStreamer(t, consumertest.StreamerOptions{Lease: time.Second})

	deadline := time.Now().Add(25 * time.Second)
	done := func(j consumertest.Job) bool { return j.Status == "completed" || j.Status == "dead_letter" }
	var a, c consumertest.Job
	for time.Now().Before(deadline) {
		a, c = b.Job(t, j1), b.Job(t, j2)
		if done(a) && done(c) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, j := range []struct {
		id  int64
		job consumertest.Job
	}{{j1, a}, {j2, c}} {
		if j.job.Status != "completed" || j.job.AttemptCount != 1 {
			t.Errorf("job %d: %s after %d attempts (class %s, error %s), handler ran %d times in all; "+
				"want completed on attempt 1 (each run took 3.5 s of its 4 s Timeout; the wait for a transaction slot is not the handler's time); history %v",
				j.id, j.job.Status, j.job.AttemptCount, deref(j.job.LastErrorClass), deref(j.job.LastError), runs.Load(), b.Outcomes(t, j.id))
		}
	}
}
