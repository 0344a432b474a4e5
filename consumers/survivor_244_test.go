package consumers_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/inlet-dev/inlet/consumers"
	"github.com/inlet-dev/inlet/consumers/internal/consumertest"
)

// workerCounters creates public.name (id int PRIMARY KEY, n int NOT NULL)
// holding rows, which the worker role may read and update.
func workerCounters(t *testing.T, b *testBundle, name, rows string) {
	t.Helper()
	if _, err := b.Admin.Exec(context.Background(), fmt.Sprintf(`
CREATE TABLE public.%[1]s (id int PRIMARY KEY, n int NOT NULL);
INSERT INTO public.%[1]s VALUES %[2]s;
GRANT SELECT, UPDATE ON public.%[1]s TO webhook_worker`, name, rows)); err != nil {
		t.Fatal(err)
	}
}

// runOneJob starts the service on cfg and a streamer leasing for lease,
// stores one event and waits until its "ledger" job is completed or
// dead-lettered; it returns the job's id.
func runOneJob(t *testing.T, b *testBundle, cfg consumers.Config, lease time.Duration) int64 {
	t.Helper()
	b.start(t, cfg)
	b.StartStreamer(t, consumertest.StreamerOptions{Lease: lease})
	id := b.JobID(t, b.InsertEvent(t, consumertest.EventParams{}), "ledger")
	consumertest.WaitFor(t, wait, "the job to finish", func() bool {
		s := b.Job(t, id).Status
		return s == "completed" || s == "dead_letter"
	})
	return id
}

// TestSurvivor244_TxPermanentOwnConflictIsNotRerun (helper-244, mutation
// testing).
//
// Guarantee (TxHandlerFunc's doc, consumers/tx.go): a transaction aborted by
// a conflict runs again within the attempt, but "a Permanent error … does
// not": Permanent means retrying cannot help, and the job goes to
// dead_letter after this attempt.
//
// Mutant: consumers/tx.go runTx, `if !rerun || IsPermanent(herr) ||
// ctx.Err() != nil` became `if !rerun || ctx.Err() != nil`: a Permanent
// error wrapping a 40001 raised in the handler's own transaction was run
// again, and the second run completed the job.
//
// Why it survived: TestTxPermanentSerializationErrorFromElsewhereIsNotRerun
// covers only a 40001 from another connection, which is not rerun anyway
// (rerun is false); no test returned Permanent around a conflict of the
// handler's own transaction.
func TestSurvivor244_TxPermanentOwnConflictIsNotRerun(t *testing.T) {
	t.Parallel()
	b := setup(t)
	workerCounters(t, b, "counter", `(1, 0)`)
	var calls atomic.Int32
	var sawConflict atomic.Bool
	h := consumers.Handler{Name: "ledger", MaxAttempts: 5, Backoff: noBackoff, Timeout: 30 * time.Second,
		TxOptions: pgx.TxOptions{IsoLevel: pgx.RepeatableRead},
		TxFunc: func(ctx context.Context, tx pgx.Tx, e *consumers.Event) error {
			if calls.Add(1) > 1 {
				return nil // a run again would complete the job
			}
			var n int
			if err := tx.QueryRow(ctx, `SELECT n FROM public.counter WHERE id = 1`).Scan(&n); err != nil { // the snapshot
				return err
			}
			// A concurrent writer: the update below is a genuine
			// serialization failure (40001) of this very transaction.
			if _, err := b.Admin.Exec(ctx, `UPDATE public.counter SET n = n + 1 WHERE id = 1`); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `UPDATE public.counter SET n = n + 1 WHERE id = 1`)
			var pgErr *pgconn.PgError
			if errors.As(err, &pgErr) && pgErr.Code == "40001" {
				sawConflict.Store(true)
			}
			if err == nil {
				return errors.New("the concurrent update raised no serialization failure")
			}
			return consumers.Permanent(fmt.Errorf("the ledger refuses this event for good: %w", err))
		}}
	id := runOneJob(t, b, b.config(h), time.Minute)
	if !sawConflict.Load() {
		t.Fatal("the handler's own update raised no 40001; the test needs one")
	}
	j := b.Job(t, id)
	if j.Status != "dead_letter" || calls.Load() != 1 {
		t.Errorf("job %s on attempt %d after %d handler runs; want dead_letter after one run: a Permanent error is not run again, even around a conflict of the handler's own transaction",
			j.Status, j.AttemptCount, calls.Load())
	}
	if got := b.Outcomes(t, id); !slices.Equal(got, []string{"dead_letter"}) {
		t.Errorf("history %v, want [dead_letter]", got)
	}
}

// TestSurvivor244_TxDeadlockVictimRunsAgain (helper-244, mutation testing).
//
// Guarantee (TxHandlerFunc's doc, consumers/tx.go, and runTx's): a
// transaction PostgreSQL aborts as "a deadlock's victim (40001, 40P01) runs
// again after a short random pause, within the same attempt", before it
// counts as a failed attempt.
//
// Mutant: consumers/tx.go conflict(), `pgErr.Code == "40001" || pgErr.Code
// == "40P01"` became `pgErr.Code == "40001"`: a deadlock's victim was
// recorded as a failed attempt (history row, attempt spent, backoff)
// instead of being run again.
//
// Why it survived: every rerun test raises 40001 (a genuine serialization
// failure, or RAISE … ERRCODE '40001'); none made the handler's transaction
// a deadlock's victim.
func TestSurvivor244_TxDeadlockVictimRunsAgain(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	workerCounters(t, b, "pair", `(1, 0), (2, 0)`)
	var calls atomic.Int32
	var attempts [8]atomic.Int32 // the attempt number each run saw
	var sawDeadlock atomic.Bool
	other := make(chan error, 1)
	h := consumers.Handler{Name: "ledger", MaxAttempts: 5, Backoff: noBackoff, Timeout: time.Minute,
		TxFunc: func(ctx context.Context, tx pgx.Tx, e *consumers.Event) error {
			run := calls.Add(1)
			if int(run) <= len(attempts) {
				attempts[run-1].Store(int32(e.Attempt))
			}
			if _, err := tx.Exec(ctx, `UPDATE public.pair SET n = n + 1 WHERE id = 1`); err != nil {
				return err
			}
			if run > 1 {
				return nil
			}
			// Another session takes row 2, then waits for row 1, which this
			// transaction holds. It looks for a deadlock only after 60s, so
			// this transaction (deadlock_timeout 1s, the default) is the
			// victim.
			conn, err := b.Admin.Acquire(ctx)
			if err != nil {
				return err
			}
			pid := conn.Conn().PgConn().PID()
			go func() {
				defer conn.Release()
				other <- pgx.BeginFunc(context.Background(), conn, func(otx pgx.Tx) error {
					if _, err := otx.Exec(context.Background(), `SET LOCAL deadlock_timeout = '60s'`); err != nil {
						return err
					}
					if _, err := otx.Exec(context.Background(), `UPDATE public.pair SET n = n + 10 WHERE id = 2`); err != nil {
						return err
					}
					_, err := otx.Exec(context.Background(), `UPDATE public.pair SET n = n + 10 WHERE id = 1`)
					return err
				})
			}()
			for waiting := false; !waiting; {
				if err := b.Admin.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_locks WHERE pid = $1 AND NOT granted)`, pid).Scan(&waiting); err != nil {
					return err
				}
				if !waiting {
					select {
					case <-ctx.Done():
						return ctx.Err()
					case <-time.After(20 * time.Millisecond):
					}
				}
			}
			_, err = tx.Exec(ctx, `UPDATE public.pair SET n = n + 1 WHERE id = 2`)
			var pgErr *pgconn.PgError
			if errors.As(err, &pgErr) && pgErr.Code == "40P01" {
				sawDeadlock.Store(true)
			}
			if err == nil {
				return errors.New("no deadlock")
			}
			return err
		}}
	id := runOneJob(t, b, b.config(h), time.Minute)
	select {
	case err := <-other:
		if err != nil {
			t.Fatalf("the other session: %v", err)
		}
	case <-time.After(wait):
		t.Fatal("the other session did not finish")
	}
	if !sawDeadlock.Load() {
		t.Fatal("the handler's transaction was not a deadlock's victim (40P01); the test needs one")
	}
	j := b.Job(t, id)
	if j.Status != "completed" || j.AttemptCount != 1 || calls.Load() != 2 || attempts[1].Load() != 1 {
		t.Errorf("job %s on attempt %d after %d runs (run 2 saw attempt %d); want completed on attempt 1 after 2 runs: a deadlock's victim runs again within its attempt",
			j.Status, j.AttemptCount, calls.Load(), attempts[1].Load())
	}
	if got := b.Outcomes(t, id); !slices.Equal(got, []string{"completed"}) {
		t.Errorf("history %v, want [completed]: the rerun is not a failed attempt", got)
	}
	var n1, n2 int
	if err := b.Admin.QueryRow(ctx, `SELECT (SELECT n FROM public.pair WHERE id = 1), (SELECT n FROM public.pair WHERE id = 2)`).Scan(&n1, &n2); err != nil {
		t.Fatal(err)
	}
	if n1 != 11 || n2 != 10 {
		t.Errorf("pair (%d, %d), want (11, 10): the victim's writes rolled back, its rerun's committed once", n1, n2)
	}
}

// TestSurvivor244_TxWrappedSavepointConflictRunsAgain (helper-244, mutation
// testing).
//
// Guarantee (TxHandlerFunc's doc and runTxOnce, consumers/tx.go): a conflict
// (40001) the handler met in a savepoint of its transaction
// (pgx.BeginFunc(ctx, tx, …)) and returns runs again within the attempt;
// conflicts.returned "reports whether err is, or wraps, a conflict noted":
// a repository layer that wraps the error (fmt.Errorf("…: %w", err)) is
// the usual case.
//
// Mutant: consumers/tx.go conflicts.returned, `if errors.Is(err, e)` became
// `if err == e`: a wrapped savepoint conflict was taken for one met
// elsewhere and recorded as a failed attempt (history [failed completed]).
//
// Why it survived: TestTxConflictInsideASavepointRunsAgain and
// TestWatchedTxNotesConflictsOfItsSavepoints return the savepoint's error
// unwrapped.
func TestSurvivor244_TxWrappedSavepointConflictRunsAgain(t *testing.T) {
	t.Parallel()
	b := setup(t)
	workerCounters(t, b, "wrapped_counter", `(1, 0)`)
	var calls atomic.Int32
	var attempts [8]atomic.Int32
	h := consumers.Handler{Name: "ledger", MaxAttempts: 5, Backoff: noBackoff,
		TxOptions: pgx.TxOptions{IsoLevel: pgx.RepeatableRead},
		TxFunc: func(ctx context.Context, tx pgx.Tx, e *consumers.Event) error {
			run := calls.Add(1)
			if int(run) <= len(attempts) {
				attempts[run-1].Store(int32(e.Attempt))
			}
			var n int
			if err := tx.QueryRow(ctx, `SELECT n FROM public.wrapped_counter WHERE id = 1`).Scan(&n); err != nil { // the snapshot
				return err
			}
			if run == 1 {
				// A concurrent writer: the update below is a genuine
				// serialization failure of this transaction.
				if _, err := b.Admin.Exec(ctx, `UPDATE public.wrapped_counter SET n = n + 1 WHERE id = 1`); err != nil {
					return err
				}
			}
			// The repository layer: a savepoint, its error wrapped.
			if err := pgx.BeginFunc(ctx, tx, func(tx pgx.Tx) error {
				_, err := tx.Exec(ctx, `UPDATE public.wrapped_counter SET n = n + 1 WHERE id = 1`)
				return err
			}); err != nil {
				return fmt.Errorf("post event %d to the ledger: %w", e.EventID, err)
			}
			return nil
		}}
	id := runOneJob(t, b, b.config(h), time.Minute)
	j := b.Job(t, id)
	if j.Status != "completed" || j.AttemptCount != 1 || calls.Load() != 2 || attempts[1].Load() != 1 {
		t.Errorf("job %s on attempt %d after %d runs (run 2 in attempt %d); want completed on attempt 1 after 2 runs: a wrapped conflict of a savepoint runs again within its attempt",
			j.Status, j.AttemptCount, calls.Load(), attempts[1].Load())
	}
	if got := b.Outcomes(t, id); !slices.Equal(got, []string{"completed"}) {
		t.Errorf("history %v, want [completed]: the rerun is not a failed attempt", got)
	}
}

// TestSurvivor244_TxRepeatableReadLeaseNotExtendedUnderItsSnapshot
// (helper-244, mutation testing).
//
// Guarantee (TxHandlerFunc's doc, consumers/tx.go): "Above READ COMMITTED
// the lease is pushed out once before the transaction begins … and not
// extended while the transaction is open, so nothing of the service writes
// the job row under its snapshot". A REPEATABLE READ handler that runs
// longer than a lease extension period completes in one run.
//
// Mutant: consumers/tx.go runTx, `snapshot := s.txDefaultAboveRC ||
// h.TxOptions.IsoLevel == pgx.RepeatableRead || … == pgx.Serializable`
// lost the RepeatableRead term: at REPEATABLE READ (set in TxOptions) the
// lease was extended under the open transaction, its completion met the
// extension's row version (40001), and every such attempt ran the handler
// twice.
//
// Why it survived: the REPEATABLE READ tests run shorter than a lease
// extension period, or set the level with SET TRANSACTION (not seen by the
// SDK); the snapshot tests that run long use SERIALIZABLE.
func TestSurvivor244_TxRepeatableReadLeaseNotExtendedUnderItsSnapshot(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const lease = time.Second
	var calls atomic.Int32
	h := consumers.Handler{Name: "ledger", MaxAttempts: 5, Backoff: noBackoff, Timeout: 20 * time.Second,
		TxOptions: pgx.TxOptions{IsoLevel: pgx.RepeatableRead},
		TxFunc: func(ctx context.Context, tx pgx.Tx, e *consumers.Event) error {
			calls.Add(1)
			if _, err := tx.Exec(ctx, `SELECT 1`); err != nil { // the snapshot is taken
				return err
			}
			// Several lease extension periods (lease_extend / 3).
			select {
			case <-time.After(2 * lease):
			case <-ctx.Done():
				return ctx.Err()
			}
			return nil
		}}
	cfg := b.config(h)
	cfg.LeaseExtend = lease
	id := runOneJob(t, b, cfg, 10*time.Second)
	j := b.Job(t, id)
	if j.Status != "completed" || j.AttemptCount != 1 || calls.Load() != 1 {
		t.Errorf("job %s on attempt %d after %d handler runs; want completed on attempt 1 after one run: nothing of the service writes the job row under a REPEATABLE READ handler's snapshot",
			j.Status, j.AttemptCount, calls.Load())
	}
}

// TestSurvivor244_TxTimedOutAttemptIsClassTimeout (helper-244, mutation
// testing).
//
// Guarantee (error classes, as TestTimeout checks for Func handlers): an
// attempt whose handler ran past its Timeout and then returned an unrelated
// error is recorded with class timeout, for a transactional handler too
// (runTxOnce reports timedOut).
//
// Mutant: consumers/tx.go runTxOnce, `timedOut = errors.Is(actx.Err(),
// context.DeadlineExceeded) && ctx.Err() == nil` became `timedOut = false &&
// …`: such a TxFunc attempt was recorded as handler_error.
//
// Why it survived: TestTimeout covers Func handlers only; the TxFunc
// timeout tests return the context's error, which ClassOf already classes
// as timeout.
func TestSurvivor244_TxTimedOutAttemptIsClassTimeout(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const timeout = 300 * time.Millisecond
	h := consumers.Handler{Name: "slowtx", MaxAttempts: 1, Backoff: noBackoff, Timeout: timeout,
		TxFunc: func(context.Context, pgx.Tx, *consumers.Event) error {
			time.Sleep(2 * timeout) // ignores its context past its Timeout
			return errors.New("gave up")
		}}
	b.start(t, b.config(h))
	b.StartStreamer(t, consumertest.StreamerOptions{Lease: time.Minute})
	id := b.JobID(t, b.InsertEvent(t, consumertest.EventParams{}), "slowtx")
	j := b.WaitJobStatus(t, id, "dead_letter", wait)
	if deref(j.LastErrorClass) != "timeout" {
		t.Errorf("last_error_class %q (error %q), want timeout: the attempt ran past its Timeout", deref(j.LastErrorClass), deref(j.LastError))
	}
	as := b.Attempts(t, id)
	if len(as) != 1 || deref(as[0].ErrorClass) != "timeout" {
		var classes []string
		for _, a := range as {
			classes = append(classes, deref(a.ErrorClass))
		}
		t.Errorf("history classes %v, want one attempt of class timeout", classes)
	}
}
