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

// New refuses a pool too small for a transactional handler.
//
// Regression test (review helper-130; fixed: the text describes the
// behaviour before the fix). A transactional handler on a pool with one
// connection. TxHandlerFunc's doc promises "The service keeps two of them
// [the pool's connections] for its own statements (reading events,
// extending leases, recording outcomes)", and txSlots (service.go, txSlots:
// max(MaxConns-txReserve, 1)) still lets one transaction open when the
// pool has fewer than txReserve+1 connections; New accepts the pool
// silently (it only logs when the handlers' Concurrency exceeds the slots).
// With pool_max_conns=1 the open transaction holds the only connection: the
// READ COMMITTED lease extension (extendLease, attempt.go) cannot get one,
// the lease runs out under a handler well inside its Timeout, the reaper
// re-leases the job, and the handler's completion is fenced out and rolled
// back. Every attempt that runs longer than a lease is lost the same way
// until the job is dead-lettered; the handler's work never commits.
//
// Here: MaxConns 1, READ COMMITTED TxFunc taking 2.5 s (Timeout 20 s),
// streamer lease 1 s, LeaseExtend 600 ms, MaxAttempts 2. Expected: the job
// completes on its first attempt, or New refuses the pool ("a pool of 1
// connection cannot run transactional handlers: at least 3"). Before:
// dead_letter (or failed), the handler's transaction rolled back.
func TestTxHandlerNeedsMoreThanOneConnection(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	pool := b.workerPool(t, 1)

	var runs atomic.Int32
	cfg := b.config(consumers.Handler{Name: "ledger", MaxAttempts: 2, Backoff: noBackoff, Timeout: 20 * time.Second,
		TxFunc: func(ctx context.Context, tx pgx.Tx, e *consumers.Event) error {
			runs.Add(1)
			if _, err := tx.Exec(ctx, `SELECT 1`); err != nil {
				return err
			}
			select { // work well inside Timeout, longer than one lease
			case <-time.After(2500 * time.Millisecond):
			case <-ctx.Done():
				return ctx.Err()
			}
			return nil
		}})
	cfg.Pool = pool
	cfg.LeaseExtend = 600 * time.Millisecond
	svc, err := consumers.New(cfg)
	if err != nil {
		return // refusing the pool at New is a fix
	}
	if err := svc.Start(ctx); err != nil {
		return // refusing it at Start too
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_ = svc.Stop(sctx)
	})
	b.StartStreamer(t, consumertest.StreamerOptions{Lease: time.Second})

	jobID := b.JobID(t, b.InsertEvent(t, consumertest.EventParams{}), "ledger")
	deadline := time.Now().Add(20 * time.Second)
	var j consumertest.Job
	for time.Now().Before(deadline) {
		j = b.Job(t, jobID)
		if j.Status == "completed" || j.Status == "dead_letter" {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if j.Status != "completed" || j.AttemptCount != 1 {
		t.Fatalf("job %d on a 1-connection pool: %s after %d attempts (class %s, error %s), handler ran %d times; "+
			"want completed on attempt 1, or New to refuse a pool too small for transactional handlers; history %+v",
			jobID, j.Status, j.AttemptCount, deref(j.LastErrorClass), deref(j.LastError), runs.Load(), b.Outcomes(t, jobID))
	}
}
