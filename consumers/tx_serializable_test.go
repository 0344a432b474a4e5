package consumers_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/consumers"
	"github.com/inlet-dev/inlet/consumers/internal/consumertest"
)

// Found by review helper-79: a SERIALIZABLE transactional handler
// (Handler.TxOptions, documented in tx.go and docs/pipeline.md as working
// "however long the handler runs") now fails with a serialization failure
// (40001, class transaction) whenever another job's SERIALIZABLE attempt
// runs at the same time, even though the two handlers touch nothing in
// common. The SDK's own first statement (ExtendLease, consumers/tx.go:100,
// an UPDATE of webhook_ingress.jobs by id) runs in the handler's
// transaction, so every attempt reads the jobs table under SSI (predicate
// locks on the partition / its index pages) and writes a job row (a non-HOT
// update: lease_expires_at is indexed) for the handler's whole duration:
// two overlapping attempts of different jobs form the write-skew pattern
// (each read what the other wrote) and PostgreSQL aborts one of them. That
// attempt counts (attempts are burnt, the last one dead-letters the job),
// though neither handler did anything that conflicts. Before 06283c1 the
// SDK touched the job only at the completion, at the very end.
//
// Expected: two independent jobs whose SERIALIZABLE handlers overlap both
// complete on attempt 1, with no failed attempt.
func TestTxSerializableAttemptsOfDifferentJobsDoNotAbortEachOther(t *testing.T) {
	t.Parallel()
	b := setup(t)
	effects(t, b)

	// Both attempts are inside their transactions (the SDK's first
	// statement has run) before either returns.
	var mu sync.Mutex
	started := map[int64]bool{}
	both := make(chan struct{})
	h := consumers.Handler{Name: "ledger", Concurrency: 2, MaxAttempts: 5, Backoff: noBackoff, Timeout: wait,
		TxOptions: pgx.TxOptions{IsoLevel: pgx.Serializable},
		TxFunc: func(ctx context.Context, tx pgx.Tx, e *consumers.Event) error {
			// The handler's own work touches nothing another job's does.
			if _, err := tx.Exec(ctx, `INSERT INTO public.effects (event_id, job_id, attempt) VALUES ($1, $2, $3)`, e.EventID, e.JobID, e.Attempt); err != nil {
				return err
			}
			mu.Lock()
			started[e.JobID] = true
			if len(started) == 2 {
				select {
				case <-both:
				default:
					close(both)
				}
			}
			mu.Unlock()
			select {
			case <-both:
			case <-time.After(10 * time.Second): // a retry runs alone
			case <-ctx.Done():
				return ctx.Err()
			}
			return nil
		}}
	b.start(t, b.config(h))
	b.StartStreamer(t, consumertest.StreamerOptions{Lease: time.Minute})

	var jobs []int64
	for i := range 2 {
		jobs = append(jobs, b.JobID(t, b.InsertEvent(t, consumertest.EventParams{ExternalID: fmt.Sprintf("evt_ser_%d", i)}), "ledger"))
	}
	for _, id := range jobs {
		var j consumertest.Job
		consumertest.WaitFor(t, wait, "the job to finish", func() bool {
			j = b.Job(t, id)
			return j.Status == "completed" || j.Status == "dead_letter"
		})
		outcomes := b.Outcomes(t, id)
		if j.Status != "completed" || j.AttemptCount != 1 || !slices.Equal(effectRows(t, b, id), []int{1}) {
			var errs []string
			for _, a := range b.Attempts(t, id) {
				errs = append(errs, fmt.Sprintf("attempt %d %s: %s", a.Attempt, a.Outcome, deref(a.Error)))
			}
			t.Errorf("job %d: %s on attempt %d, outcomes %v, effects %v; want completed on attempt 1 (its handler conflicts with nothing)\n%v",
				id, j.Status, j.AttemptCount, outcomes, effectRows(t, b, id), errs)
		}
	}
}
