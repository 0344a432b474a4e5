package consumers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/consumers/bus"
)

// TxHandlerFunc handles one attempt inside a transaction on the consumer's
// pool (Config.Pool), for a handler whose effects live in the same
// PostgreSQL. When it returns nil, the service completes the job in that same
// transaction, fenced on the attempt's lease token, and commits: the
// handler's writes and the job's completion commit together or not at all.
// When it returns an error or panics, or when the process dies before the
// commit, the transaction is rolled back and its writes are gone; a later
// attempt runs the handler again. So each event's effects are written
// exactly once, however often the handler runs.
//
// The transaction holds the attempt's lease by the job's row lock: its
// first statement, before the handler runs, extends the lease (fenced on
// the lease token), which locks the row, and nothing else writes the row
// until the transaction ends (the reaper and the streamer's give-back skip
// it; a replay or a duplicate delivery waits for it). When the lease was
// lost before that statement (the attempt expired and was leased again, was
// replayed, or a duplicate delivery of it completed first), the handler is
// not run. As no other session changes the job row under the transaction's
// snapshot, any isolation level works: set it in [Handler.TxOptions], not
// with SET TRANSACTION in the handler (it would come after the first
// statement and fail).
//
// Each open transaction holds one of the pool's connections. The service
// keeps two of them for its own statements (reading events, extending
// leases, recording outcomes), so at most the pool's MaxConns less two
// transactional attempts run at once, whatever the handlers' Concurrency;
// the others wait for a connection before their Timeout starts. Size the
// pool for the transactions you want open at once (pool_max_conns in the
// database URL; pgx's default is the larger of 4 and the CPU count).
//
// tx runs as the consumer's database role (webhook_worker, or the team's
// consumer role): grant it what the handler writes. The handler must not
// use tx after returning; its Commit and Rollback return an error (the
// service ends the transaction).
type TxHandlerFunc func(ctx context.Context, tx pgx.Tx, e *Event) error

// ClassTransaction is the class of an attempt whose handler succeeded but
// whose transaction could not be committed with the job's completion; its
// writes were rolled back.
const ClassTransaction ErrorClass = "transaction"

// runTx runs h.TxFunc in a transaction and, when it returns nil, completes
// the job in that transaction and commits. stopExtending is called before
// the transaction's first statement takes the job's row lock: from then on
// the lock holds the lease, and an extension from another session would
// wait on it (and change the row under the transaction's snapshot). It
// returns whether the attempt's own deadline passed; when the success was
// written (or fenced out), the outcome recorded with recorded true; and the
// handler's error (or the transaction's, classed [ClassTransaction]) to be
// recorded as a failed attempt.
func (s *Service) runTx(ctx context.Context, h Handler, ref bus.Ref, l lease, ev *Event, stopExtending func()) (timedOut bool, outcome string, recorded bool, herr error) {
	// A connection of the pool's share for handler transactions
	// (txReserve), before the handler's own clock starts: waiting for one
	// is not the handler's time, and the lease is extended meanwhile.
	select {
	case s.txSlots <- struct{}{}:
		defer func() { <-s.txSlots }()
	case <-ctx.Done():
		stopExtending()
		return false, "", false, WithClass(fmt.Errorf("wait for a connection for the handler's transaction: %w", context.Cause(ctx)), ClassTransaction)
	}
	actx, cancel := context.WithTimeout(ctx, h.Timeout)
	defer cancel()
	tx, err := s.cfg.Pool.BeginTx(actx, h.TxOptions)
	if err != nil {
		stopExtending()
		return false, "", false, WithClass(fmt.Errorf("begin the handler's transaction: %w", err), ClassTransaction)
	}
	// Whatever is not committed below is rolled back, on a context of its
	// own: the handler's may have ended.
	defer func() {
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer rcancel()
		_ = tx.Rollback(rctx) // after Commit it is a no-op (pgx.ErrTxClosed); a failed rollback closes the connection, which rolls back too
	}()

	// The transaction holds the lease by the job's row lock from its first
	// statement to its end: the lease is extended (fenced) in it, which
	// locks the row, and nothing else writes the row meanwhile. The reaper
	// skips locked rows, and a replay or a duplicate delivery waits for the
	// lock and then finds the lease gone. Extending from another session
	// instead would change the row under the transaction's snapshot, and a
	// REPEATABLE READ or SERIALIZABLE transaction could then never complete
	// the job (40001) once it ran past one extension.
	stopExtending()
	if _, err := s.extendOn(actx, tx, ref, l); errors.Is(err, pgx.ErrNoRows) {
		s.logger.LogAttrs(ctx, slog.LevelDebug, "handler not run: the job's lease was lost before its transaction began",
			slog.Int64("job_id", ref.JobID), slog.Int("attempt", ref.Attempt))
		return false, "", true, nil
	} else if err != nil {
		return false, "", false, WithClass(fmt.Errorf("hold the lease of job %d in the handler's transaction: %w", ref.JobID, err), ClassTransaction)
	}
	if _, err := tx.Exec(actx, "SAVEPOINT inlet_attempt"); err != nil {
		return false, "", false, WithClass(fmt.Errorf("begin the handler's transaction: %w", err), ClassTransaction)
	}
	herr = callTx(actx, h.TxFunc, handlerTx{tx}, ev)
	timedOut = errors.Is(actx.Err(), context.DeadlineExceeded) && ctx.Err() == nil
	if herr != nil {
		s.keepLease(ctx, tx, ref, l)
		return timedOut, "", false, herr
	}

	// The completion and the commit get their own deadline, as record does.
	rctx, rcancel := context.WithTimeout(context.WithoutCancel(s.workCtx), recordTimeout)
	defer rcancel()
	done, err := s.completeJobsOn(rctx, tx, []completion{{ref: ref, l: l}})
	if err != nil {
		return timedOut, "", false, WithClass(fmt.Errorf("complete job %d in the handler's transaction: %w", ref.JobID, err), ClassTransaction)
	}
	if !done[ref.JobID] {
		// Lost lease: the rollback throws the handler's writes away.
		s.logger.LogAttrs(ctx, slog.LevelDebug, "handler's transaction rolled back: the job's lease was lost",
			slog.Int64("job_id", ref.JobID), slog.Int("attempt", ref.Attempt))
		return timedOut, "", true, nil
	}
	if err := tx.Commit(rctx); err != nil {
		// Not committed, or not known to be: recorded as a failure, which
		// is fenced like any outcome, so a commit that did land stays the
		// job's outcome.
		return timedOut, "", false, WithClass(fmt.Errorf("commit the handler's transaction with job %d's completion: %w", ref.JobID, err), ClassTransaction)
	}
	s.completed.Add(1)
	s.succeeded(rctx, []string{ref.Handler})
	return timedOut, "completed", true, nil
}

// keepLease, after the handler failed, throws its writes away and commits
// the lease pushed out from now, so the failure is recorded (on the pool,
// after this) before the lease can expire: the handler may have run past
// the lease the transaction began with. Best effort: when it fails, the
// lease may expire first and the reaper then counts the attempt.
func (s *Service) keepLease(ctx context.Context, tx pgx.Tx, ref bus.Ref, l lease) {
	kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
	defer cancel()
	if _, err := tx.Exec(kctx, "ROLLBACK TO SAVEPOINT inlet_attempt"); err != nil {
		return
	}
	if _, err := s.extendOn(kctx, tx, ref, l); err != nil {
		return
	}
	_ = tx.Commit(kctx)
}

// handlerTx is the transaction as the handler sees it: it may not end it.
// Committing would commit the handler's writes without the job's
// completion (run again by the next attempt), and the lease's row lock
// with them.
type handlerTx struct{ pgx.Tx }

var errHandlerEndsTx = errors.New("a transactional handler must not commit or roll back its transaction: return nil to commit, an error to roll back")

func (handlerTx) Commit(context.Context) error   { return errHandlerEndsTx }
func (handlerTx) Rollback(context.Context) error { return errHandlerEndsTx }

// callTx calls f, turning a panic into an error.
func callTx(ctx context.Context, f TxHandlerFunc, tx pgx.Tx, ev *Event) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = newPanicError(p)
		}
	}()
	return notTypedNil(f(ctx, tx, ev))
}
