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
// When it returns an error or panics, when the lease was lost meanwhile (the
// attempt expired and was leased again, was replayed, or a duplicate
// delivery of it completed first), or when the process dies before the
// commit, the transaction is rolled back and its writes are gone; a later
// attempt runs the handler again. So each event's effects are written
// exactly once, however often the handler runs.
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
// commit or roll back tx itself, and must not use it after returning.
type TxHandlerFunc func(ctx context.Context, tx pgx.Tx, e *Event) error

// ClassTransaction is the class of an attempt whose handler succeeded but
// whose transaction could not be committed with the job's completion; its
// writes were rolled back.
const ClassTransaction ErrorClass = "transaction"

// runTx runs h.TxFunc in a transaction and, when it returns nil, completes
// the job in that transaction and commits. stopExtending is called once the
// handler has returned, before the completion takes the job's row lock (an
// extension waiting on it would read the completed row as a lost lease). It
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
	tx, err := s.cfg.Pool.Begin(actx)
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
	herr = callTx(actx, h.TxFunc, tx, ev)
	timedOut = errors.Is(actx.Err(), context.DeadlineExceeded) && ctx.Err() == nil
	stopExtending()
	if herr != nil {
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

// callTx calls f, turning a panic into an error.
func callTx(ctx context.Context, f TxHandlerFunc, tx pgx.Tx, ev *Event) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = newPanicError(p)
		}
	}()
	return notTypedNil(f(ctx, tx, ev))
}
