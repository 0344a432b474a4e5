package consumers_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/consumers"
	"github.com/inlet-dev/inlet/consumers/internal/consumertest"
)

// Review helper-82. Defect: the SDK's in-attempt rerun of a transactional
// handler (consumers/tx.go, runTx's loop and retryableTx) fires on ANY error
// whose chain holds a PgError 40001/40P01, not on "a transaction PostgreSQL
// aborts" as tx.go, doc.go and docs/pipeline.md say. A handler that reports
// a serialization failure from another connection or database (a reporting
// database, a service's own pgx pool, after an external call) and marks it
// Permanent ("retrying cannot help": the job goes to dead_letter after this
// attempt, errors.go) is run again at once, twice more, within the same
// attempt: its external effects are repeated with no backoff, no history row
// and only a debug log line, and its Permanent verdict is ignored until the
// third run.
//
// Expected: the handler runs once; the job is dead-lettered on attempt 1 with
// class permanent.
func TestTxPermanentSerializationErrorFromElsewhereIsNotRerun(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var calls atomic.Int32
	h := consumers.Handler{Name: "ledger", MaxAttempts: 5, Backoff: noBackoff,
		TxFunc: func(ctx context.Context, tx pgx.Tx, e *consumers.Event) error {
			calls.Add(1) // stands for an external effect: an e-mail sent, an API called
			// Another database connection (not tx) reports a serialization
			// failure; the handler's own transaction is untouched.
			_, err := b.Admin.Exec(ctx, `DO $$ BEGIN RAISE EXCEPTION 'reporting database: could not serialize access' USING ERRCODE = '40001'; END $$`)
			if err == nil {
				t.Error("the RAISE did not fail")
				return nil
			}
			return consumers.Permanent(fmt.Errorf("downstream rejected the event for good: %w", err))
		}}
	b.start(t, b.config(h))
	b.StartStreamer(t, consumertest.StreamerOptions{})
	id := b.JobID(t, b.InsertEvent(t, consumertest.EventParams{}), "ledger")
	j := b.WaitJobStatus(t, id, "dead_letter", wait)
	if n := calls.Load(); n != 1 {
		t.Errorf("the handler ran %d times in attempt %d after returning a Permanent error; want once (Permanent: retrying cannot help, and its own transaction was never aborted)",
			n, j.AttemptCount)
	}
	if got := b.Outcomes(t, id); !slices.Equal(got, []string{"dead_letter"}) {
		t.Errorf("history %v, want [dead_letter]", got)
	}
}

// Review helper-82. Defect: Handler.Timeout is documented as "Timeout bounds
// one attempt; the handler's context ends then" (handler.go), but a
// transactional attempt whose transaction is aborted with 40001/40P01 gets a
// fresh Timeout for every rerun (runTxOnce, consumers/tx.go: actx :=
// context.WithTimeout(ctx, h.Timeout) per try, and the lease is re-extended
// to now()+Timeout+16s each time), so one attempt can run up to three
// Timeouts (plus three completions), and the handler's context deadline
// moves later on each rerun. Operators sizing Stop's drain, lease_extend and
// the reaper's recovery time on Timeout get three times that.
//
// Expected: every run of one attempt sees the attempt's deadline (the first
// run's start + Timeout); a rerun that does not fit in what is left fails the
// attempt as a timeout.
func TestTxRerunsShareTheAttemptsTimeout(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	if _, err := b.Admin.Exec(ctx, `
CREATE TABLE public.counter (id int PRIMARY KEY, n int NOT NULL);
INSERT INTO public.counter VALUES (1, 0);
GRANT SELECT, UPDATE ON public.counter TO webhook_worker`); err != nil {
		t.Fatal(err)
	}
	const timeout = 3 * time.Second
	var mu sync.Mutex
	var deadlines []time.Time
	var starts []time.Time
	var attempts []int
	h := consumers.Handler{Name: "ledger", MaxAttempts: 5, Backoff: noBackoff, Timeout: timeout,
		TxOptions: pgx.TxOptions{IsoLevel: pgx.RepeatableRead},
		TxFunc: func(ctx context.Context, tx pgx.Tx, e *consumers.Event) error {
			d, _ := ctx.Deadline()
			mu.Lock()
			deadlines = append(deadlines, d)
			starts = append(starts, time.Now())
			attempts = append(attempts, e.Attempt)
			run := len(deadlines)
			mu.Unlock()
			var n int
			if err := tx.QueryRow(ctx, `SELECT n FROM public.counter WHERE id = 1`).Scan(&n); err != nil { // the snapshot
				return err
			}
			if run <= 2 {
				// A concurrent writer: the update below is a genuine
				// serialization failure (40001) of this transaction.
				if _, err := b.Admin.Exec(ctx, `UPDATE public.counter SET n = n + 1 WHERE id = 1`); err != nil {
					return err
				}
			}
			select { // the handler's work: 40% of its Timeout
			case <-time.After(timeout * 2 / 5):
			case <-ctx.Done():
				return ctx.Err()
			}
			_, err := tx.Exec(ctx, `UPDATE public.counter SET n = n + 1 WHERE id = 1`)
			return err
		}}
	b.start(t, b.config(h))
	b.StartStreamer(t, consumertest.StreamerOptions{Lease: time.Minute})
	id := b.JobID(t, b.InsertEvent(t, consumertest.EventParams{}), "ledger")
	consumertest.WaitFor(t, wait, "the job to finish", func() bool {
		s := b.Job(t, id).Status
		return s == "completed" || s == "dead_letter" || s == "failed"
	})
	j := b.Job(t, id)
	mu.Lock()
	defer mu.Unlock()
	if len(deadlines) < 2 {
		t.Fatalf("the handler ran %d times; the test needs a rerun (job %s)", len(deadlines), j.Status)
	}
	for i, d := range deadlines[1:] {
		if attempts[i+1] != attempts[0] {
			continue // a later attempt has a Timeout of its own
		}
		if d.After(deadlines[0].Add(100 * time.Millisecond)) {
			t.Errorf("run %d of attempt %d started %v after the first with its context deadline %v after the first run's: "+
				"Timeout (%v) is documented to bound one attempt, and this attempt's handler ran until %v after it started (job %s on attempt %d)",
				i+2, j.AttemptCount, starts[i+1].Sub(starts[0]).Round(time.Millisecond), d.Sub(deadlines[0]).Round(time.Millisecond),
				timeout, time.Since(starts[0]).Round(time.Millisecond), j.Status, j.AttemptCount)
		}
	}
}
