package consumers_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/consumers"
	"github.com/inlet-dev/inlet/consumers/internal/consumertest"
)

// Found by review helper-71: a transactional handler whose transaction ran
// REPEATABLE READ or SERIALIZABLE could never complete a job once it ran
// past one lease-extension tick (LeaseExtend/3): the SDK extended the lease
// from another session, which changed the job row under the transaction's
// snapshot, and the completion in the transaction then failed with 40001
// every time, until the job was dead-lettered. The transaction now holds the
// lease by the job's row lock from its first statement, and nothing else
// writes the row meanwhile.
func TestTxIsolationOutlivesLeaseExtension(t *testing.T) {
	t.Parallel()
	for _, level := range []pgx.TxIsoLevel{pgx.RepeatableRead, pgx.Serializable} {
		t.Run(string(level), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			effects(t, b)
			h := consumers.Handler{Name: "ledger", MaxAttempts: 3, Backoff: noBackoff, Timeout: wait,
				TxOptions: pgx.TxOptions{IsoLevel: level},
				TxFunc: func(ctx context.Context, tx pgx.Tx, e *consumers.Event) error {
					if err := write(ctx, tx, e); err != nil {
						return err
					}
					// Slower than several extension ticks (200 ms each).
					select {
					case <-ctx.Done():
						return ctx.Err()
					case <-time.After(time.Second):
						return nil
					}
				}}
			cfg := b.config(h)
			cfg.LeaseExtend = 600 * time.Millisecond
			b.start(t, cfg)
			b.StartStreamer(t, consumertest.StreamerOptions{Lease: time.Minute})
			jobID := b.JobID(t, b.InsertEvent(t, consumertest.EventParams{}), "ledger")

			var j consumertest.Job
			consumertest.WaitFor(t, wait, "the job to finish", func() bool {
				j = b.Job(t, jobID)
				return j.Status == "completed" || j.Status == "dead_letter"
			})
			rows := effectRows(t, b, jobID)
			outcomes := b.Outcomes(t, jobID)
			if j.Status != "completed" || !slices.Equal(rows, []int{1}) || !slices.Equal(outcomes, []string{"completed"}) {
				t.Fatalf("a %s handler that held its lease throughout: job %s after %d attempts (class %s, error %q), effects %v, outcomes %v; want completed at attempt 1, effects [1]",
					level, j.Status, j.AttemptCount, deref(j.LastErrorClass), deref(j.LastError), rows, outcomes)
			}
		})
	}
}

// A transactional handler may not end its own transaction: its Commit and
// Rollback fail (committing would commit its writes without the job's
// completion, and a retry would write them again).
func TestTxHandlerCannotEndItsTransaction(t *testing.T) {
	t.Parallel()
	b := setup(t)
	effects(t, b)
	errs := make(chan error, 2)
	b.start(t, b.config(consumers.Handler{Name: "ledger", MaxAttempts: 5, Backoff: noBackoff,
		TxFunc: func(ctx context.Context, tx pgx.Tx, e *consumers.Event) error {
			if err := write(ctx, tx, e); err != nil {
				return err
			}
			errs <- tx.Commit(ctx)
			errs <- tx.Rollback(ctx)
			return nil
		}}))
	ref := publishOne(t, b)
	b.WaitJobStatus(t, ref.JobID, "completed", wait)
	for _, what := range []string{"Commit", "Rollback"} {
		if err := <-errs; err == nil || !strings.Contains(err.Error(), "must not commit or roll back") {
			t.Fatalf("the handler's %s: %v, want refused", what, err)
		}
	}
	if got := effectRows(t, b, ref.JobID); len(got) != 1 {
		t.Fatalf("effects committed %d times, want once", len(got))
	}
}
