package consumers_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/consumers"
	"github.com/inlet-dev/inlet/consumers/internal/consumertest"
)

// TestTxHandlerWhoseTransactionEndedIsNotCompleted: a transactional
// handler that ends its own transaction (here through a library given
// tx.Conn()) fails its attempt with class transaction; the job is not
// completed outside the transaction, and the next attempt commits once.
//
// Regression test (review helper-110; fixed: the text describes the
// behaviour before the fix). A transactional handler's transaction can be ended by something
// other than its Commit/Rollback methods (which handlerTx blocks): here a
// library handed tx.Conn() opens "its own" transaction with
// pgx.BeginFunc(ctx, tx.Conn(), …). PostgreSQL only warns at that BEGIN
// ("there is already a transaction in progress"), and the library's
// ROLLBACK on its error then rolls back the handler's WHOLE transaction,
// its earlier writes included. The handler, treating that step as optional,
// returns nil. runTxOnce (consumers/tx.go:173-205) never looks at the
// connection's transaction status after the handler returns: it runs the
// completion (CompleteJobs) on a connection that is no longer in a
// transaction, i.e. in autocommit, then tx.Commit sends COMMIT, which
// PostgreSQL answers with a mere warning. The job is recorded completed and
// its effects are gone: a lost effect behind a "completed" job, silently
// (the same hole with a COMMIT — a SQL script "BEGIN; …; COMMIT;" run through
// tx.Exec — commits the writes outside the lease fence).
//
// Expected (tx.go's doc: "the handler's writes and the job's completion
// commit together or not at all"): an attempt whose transaction is no longer
// open when the handler returns is not completed; it is recorded as a failed
// attempt (class transaction, naming the cause) and the next attempt runs the
// handler again, so the job ends completed with exactly one committed run.
func TestTxHandlerWhoseTransactionEndedIsNotCompleted(t *testing.T) {
	t.Parallel()
	b := setup(t)
	effects(t, b)
	h := consumers.Handler{Name: "ledger", MaxAttempts: 5, Backoff: noBackoff, TxFunc: func(ctx context.Context, tx pgx.Tx, e *consumers.Event) error {
		if err := write(ctx, tx, e); err != nil {
			return err
		}
		if e.Attempt == 1 {
			// An optional enrichment step through a library that takes a
			// *pgx.Conn and runs in "its own" transaction; it fails, and the
			// handler carries on without it.
			_ = pgx.BeginFunc(ctx, tx.Conn(), func(pgx.Tx) error { return errors.New("enrichment unavailable") })
		}
		return nil
	}}
	b.start(t, b.config(h))
	b.StartStreamer(t, consumertest.StreamerOptions{})

	job := b.JobID(t, b.InsertEvent(t, consumertest.EventParams{ExternalID: "evt_tx_ended"}), "ledger")
	j := b.WaitJobStatus(t, job, "completed", wait)
	got := effectRows(t, b, job)
	if !slices.Equal(got, []int{2}) {
		t.Fatalf("job completed (attempt_count %d) with committed effects of attempts %v; want exactly one committed run "+
			"(attempt 2's): attempt 1's handler transaction was rolled back inside the handler, yet the SDK completed the job "+
			"outside it (history: %v)", j.AttemptCount, got, b.Outcomes(t, job))
	}
}
