package consumers_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/consumers"
	"github.com/inlet-dev/inlet/consumers/internal/consumertest"
)

// Review helper-82. Defect: ef88c54's answer to helper-79 (SERIALIZABLE
// transactional attempts of unrelated jobs abort each other) is to rerun an
// aborted transaction at once, up to three times (consumers/tx.go, txTries).
// That only helps while at most about three such attempts overlap: the
// SDK's own completion in the handler's transaction (CompleteJobs →
// webhook_ingress.complete_jobs, schema/migrations/035) takes a
// RELATION-level SIReadLock on the job's jobs partition (seen in pg_locks:
// "relation webhook_ingress.jobs_pYYYYMMDD" plus a page of its pkey) and
// writes a row of it, so every two overlapping SERIALIZABLE handler
// transactions form a read/write cycle, and of N overlapping ones exactly
// one commits per round (the service log shows it: 6 → 1 commits, 5 rerun;
// 5 → 1; 4 → 1, 3 fail the attempt). With six jobs whose handlers touch
// nothing in common (an INSERT into a table without indexes), three burn an
// attempt with class transaction ("could not serialize access due to
// read/write dependencies", SQLSTATE 40001) on every run of this test; with
// MaxAttempts small, or more handlers at once (Concurrency defaults to 64,
// the pool allows MaxConns-2 transactions), jobs are dead-lettered and a
// circuit breaker opens, although no handler conflicted with another. The
// throughput of SERIALIZABLE handlers is one commit per handler duration.
//
// Expected (as TestTxSerializableAttemptsOfDifferentJobsDoNotAbortEachOther
// says for two): independent jobs whose SERIALIZABLE handlers overlap all
// complete on attempt 1, with no failed attempt.
func TestTxManySerializableAttemptsDoNotBurnAttempts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	effects(t, b)
	const n = 6
	h := consumers.Handler{Name: "ledger", Concurrency: n, MaxAttempts: 5, Backoff: noBackoff, Timeout: wait,
		TxOptions: pgx.TxOptions{IsoLevel: pgx.Serializable},
		TxFunc: func(ctx context.Context, tx pgx.Tx, e *consumers.Event) error {
			if err := write(ctx, tx, e); err != nil {
				return err
			}
			// The six attempts (one claim, one message) overlap, as a busy
			// consumer's do; reruns start at once, so they overlap too.
			select {
			case <-time.After(300 * time.Millisecond):
			case <-ctx.Done():
				return ctx.Err()
			}
			return nil
		}}
	b.start(t, b.config(h))
	var jobs []int64
	for i := range n {
		jobs = append(jobs, b.JobID(t, b.InsertEvent(t, consumertest.EventParams{ExternalID: fmt.Sprintf("evt_many_%d", i)}), "ledger"))
	}
	b.StartStreamer(t, consumertest.StreamerOptions{Lease: time.Minute})
	for _, id := range jobs {
		var j consumertest.Job
		consumertest.WaitFor(t, 2*wait, "the job to finish", func() bool {
			j = b.Job(t, id)
			return j.Status == "completed" || j.Status == "dead_letter"
		})
		if j.Status != "completed" || j.AttemptCount != 1 || !slices.Equal(effectRows(t, b, id), []int{1}) {
			var errs []string
			for _, a := range b.Attempts(t, id) {
				errs = append(errs, fmt.Sprintf("attempt %d %s: %.200s", a.Attempt, a.Outcome, deref(a.Error)))
			}
			t.Errorf("job %d: %s on attempt %d, effects %v\n%v", id, j.Status, j.AttemptCount, effectRows(t, b, id), errs)
		}
	}
}
