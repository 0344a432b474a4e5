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

// TestTxWaitBoundIgnoresTheCommitTime, before the fix: an honest queue for the
// transactions' connections outlasts txWaitBound, and a healthy attempt that
// never ran its handler fails class transaction (here: is dead-lettered).
//
// Regression test (review helper-133; fixed: the text describes the
// behaviour before the fix). txWaitBound (consumers/service.go ~line 150)
// takes each attempt ahead to hold its slot at most its Timeout and one
// LeaseExtend. But runTx holds the slot (consumers/tx.go ~line 106, released
// when runTx returns) also for the completion and the COMMIT, which
// runTxOnce runs AFTER the handler's Timeout on a context of their own,
// bounded by recordTimeout = 15 s (consumers/attempt.go ~line 31,
// consumers/tx.go ~line 203), plus the deferred rollback (5 s) on a failed
// run. So whenever lease_extend is below ~15 s, a commit that is merely slow
// (a deferred constraint trigger, synchronous replication catching up, a
// burst of fsyncs) keeps the slot past the bound while every handler honours
// its context. The attempt queued behind it then fails with "no connection
// for the handler's transaction within …: … (a transactional handler that
// ignores its context?)" — a misleading error, an attempt spent, and, on the
// last attempt, a job dead-lettered whose handler never ran.
//
// Here: a pool of 3 (one transaction slot), Concurrency 2, Timeout 2 s,
// LeaseExtend 500 ms, so the bound is (2 s + 0.5 s) × 2 = 5 s. The handler
// inserts one row and returns at once; the row's deferred constraint trigger
// makes the commit take 6 s (well inside recordTimeout). Two jobs, one
// attempt each.
//
// Expected: both jobs complete (the second waits ~6 s for the slot, as an
// honest queue does). Got: the second job's only attempt fails class
// transaction before its handler ran, and it is dead-lettered.
func TestTxWaitBoundIgnoresTheCommitTime(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	if _, err := b.Admin.Exec(ctx, `
CREATE TABLE public.review_slow_ledger (job_id bigint NOT NULL);
CREATE FUNCTION public.review_slow_commit() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN PERFORM pg_sleep(6); RETURN NULL; END $$;
CREATE CONSTRAINT TRIGGER review_slow_commit AFTER INSERT ON public.review_slow_ledger
  DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION public.review_slow_commit();
GRANT INSERT ON public.review_slow_ledger TO webhook_worker;
GRANT EXECUTE ON FUNCTION public.review_slow_commit() TO webhook_worker`); err != nil {
		t.Fatal(err)
	}
	pool := b.workerPool(t, 3) // one transaction slot

	var runs atomic.Int32
	cfg := b.config(consumers.Handler{Name: "ledger", MaxAttempts: 1, Concurrency: 2, Backoff: noBackoff, Timeout: 2 * time.Second,
		TxOptions: pgx.TxOptions{IsoLevel: pgx.ReadCommitted},
		TxFunc: func(ctx context.Context, tx pgx.Tx, e *consumers.Event) error {
			runs.Add(1)
			_, err := tx.Exec(ctx, `INSERT INTO public.review_slow_ledger (job_id) VALUES ($1)`, e.JobID)
			return err // honest: returns at once; only its commit is slow
		}})
	cfg.Pool = pool
	cfg.LeaseExtend = 500 * time.Millisecond
	b.start(t, cfg)

	j1 := b.JobID(t, b.InsertEvent(t, consumertest.EventParams{}), "ledger")
	j2 := b.JobID(t, b.InsertEvent(t, consumertest.EventParams{}), "ledger")
	// A 3 s first lease: the test is about the slot's wait bound, not the
	// first extension's timing (with 1 s, a CI run loaded with every
	// package's tests once lost job 1's lease before its first extension).
	b.StartStreamer(t, consumertest.StreamerOptions{Lease: 3 * time.Second})

	final := func(j consumertest.Job) bool { return j.Status == "completed" || j.Status == "dead_letter" }
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if final(b.Job(t, j1)) && final(b.Job(t, j2)) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	for _, id := range []int64{j1, j2} {
		j := b.Job(t, id)
		if j.Status != "completed" {
			var why string
			for _, a := range b.Attempts(t, id) {
				why += " [attempt " + a.Outcome + " class " + deref(a.ErrorClass) + ": " + deref(a.Error) + "]"
			}
			t.Errorf("job %d: %s (attempt %d of %d; handler ran %d times in all), history:%s; "+
				"want completed: no handler ignored its context, the queue only waited for a slow commit (inside recordTimeout)",
				id, j.Status, j.AttemptCount, j.MaxAttempts, runs.Load(), why)
		}
	}
}
