package consumers_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/consumers"
	"github.com/inlet-dev/inlet/consumers/internal/consumertest"
)

// TestTxConflictInsideASavepointRunsAgain (review helper-221, fixed).
// Defect: a transactional handler whose writes go through pgx's idiom for
// "a transaction, or a savepoint when given one", pgx.BeginFunc(ctx, tx, fn)
// (a repository layer written against an interface with Begin), and meets a
// serialization failure there (40001, a concurrent update under REPEATABLE
// READ) returns that PostgreSQL error of its own transaction, but the SDK
// does not run the transaction again: pgx rolled back to the savepoint, so
// the transaction is no longer in the aborted state ('E'), and runTx takes
// the 40001 for one "met on another connection". The attempt is recorded as
// failed (class handler_error, backoff, an attempt spent; under contention
// jobs burn attempts toward dead_letter). tx.go (TxHandlerFunc, runTx) and
// docs/pipeline.md: "A transaction PostgreSQL aborts as a serialization
// failure or a deadlock's victim (40001, 40P01) … raised in it: by the
// handler's statements … runs again … before it counts as a failed attempt".
// Root cause: consumers/tx.go runTxOnce, `aborted := TxStatus() == 'E'` as
// the only test of "raised in this transaction".
// Setup: REPEATABLE READ handler; it reads a row (its snapshot), another
// session updates the row (first run only), then the handler updates it
// inside pgx.BeginFunc(ctx, tx, …) and returns the error.
// Expected: the conflict is run again within attempt 1 (as it is when the
// same UPDATE is made on tx directly): job completed on attempt 1, no
// failed attempt in its history.
// Observed: history [failed completed]: attempt 1 failed, class
// handler_error, "could not serialize access due to concurrent update"; the
// handler ran once in attempt 1.
// Fixed: the handler's tx (handlerTx, watchedTx) remembers every 40001 or
// 40P01 its statements return, savepoints begun on it included (Exec,
// Query and its rows, QueryRow, SendBatch, CopyFrom, Begin, a savepoint's
// Commit), and runTxOnce runs the transaction again when the handler's
// error is one of them, whatever the transaction's status; a conflict met
// on another connection is still not run again.
func TestTxConflictInsideASavepointRunsAgain(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	if _, err := b.Admin.Exec(ctx, `
CREATE TABLE public.savepoint_conflict_counter (id int PRIMARY KEY, n int NOT NULL);
INSERT INTO public.savepoint_conflict_counter VALUES (1, 0);
GRANT SELECT, UPDATE ON public.savepoint_conflict_counter TO webhook_worker`); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var runs []int // the attempt of each run
	h := consumers.Handler{Name: "ledger", MaxAttempts: 5, Backoff: noBackoff,
		TxOptions: pgx.TxOptions{IsoLevel: pgx.RepeatableRead},
		TxFunc: func(ctx context.Context, tx pgx.Tx, e *consumers.Event) error {
			mu.Lock()
			runs = append(runs, e.Attempt)
			first := len(runs) == 1
			mu.Unlock()
			var n int
			if err := tx.QueryRow(ctx, `SELECT n FROM public.savepoint_conflict_counter WHERE id = 1`).Scan(&n); err != nil { // the snapshot
				return err
			}
			if first {
				// A concurrent writer: the update below is a genuine
				// serialization failure of this transaction.
				if _, err := b.Admin.Exec(ctx, `UPDATE public.savepoint_conflict_counter SET n = n + 1 WHERE id = 1`); err != nil {
					return err
				}
			}
			// The repository layer: a transaction of its own, or a
			// savepoint of the one it is given.
			return pgx.BeginFunc(ctx, tx, func(tx pgx.Tx) error {
				_, err := tx.Exec(ctx, `UPDATE public.savepoint_conflict_counter SET n = n + 1 WHERE id = 1`)
				return err
			})
		}}
	b.start(t, b.config(h))
	b.StartStreamer(t, consumertest.StreamerOptions{Lease: time.Minute})
	id := b.JobID(t, b.InsertEvent(t, consumertest.EventParams{}), "ledger")
	j := b.WaitJobStatus(t, id, "completed", wait)
	mu.Lock()
	defer mu.Unlock()
	as := b.Attempts(t, id)
	var hist []string
	for _, a := range as {
		hist = append(hist, fmt.Sprintf("%s(attempt %d, class %s: %.80s)", a.Outcome, a.Attempt, deref(a.ErrorClass), deref(a.Error)))
	}
	if j.AttemptCount != 1 || len(as) != 1 {
		t.Fatalf("the serialization failure raised in the handler's own transaction (inside a savepoint) was not run again: "+
			"job completed on attempt %d, runs by attempt %v, history %v; want completed on attempt 1 after a rerun, no failed attempt",
			j.AttemptCount, runs, hist)
	}
}
