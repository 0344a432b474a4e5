package consumers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

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
// Any isolation level works: set it in [Handler.TxOptions] (or as the
// login role's or database's default_transaction_isolation), not with SET
// TRANSACTION in the handler, which the service does not see. A default set
// on a per-consumer role (ALTER ROLE … SET) applies only to sessions that
// log in as it: a pool opened with [OpenPoolAs] logs in as another role and
// switches with SET ROLE, which PostgreSQL does not apply role settings to,
// so set the level in TxOptions there. Above READ
// COMMITTED the lease is pushed out once before the transaction begins, far
// enough for the handler's Timeout and the completion, and not extended
// while the transaction is open, so nothing of the service writes the job
// row under its snapshot; a consumer that dies or is cut off meanwhile holds
// nothing, and the lease runs out after that Timeout. At READ COMMITTED the
// lease is extended while the handler runs, as for any handler.
// A transaction PostgreSQL aborts as a serialization failure or a deadlock's
// victim (40001, 40P01; SERIALIZABLE attempts of different jobs abort each
// other through the job rows they complete, and of those that conflict one
// commits each round) runs again after a short random pause, within the
// same attempt and its Timeout (one deadline for all its runs), before it
// counts as a failed attempt, also when the handler met it in a savepoint
// of tx (pgx.BeginFunc(ctx, tx, …)) and returns it; a Permanent error, or
// a 40001 the handler met on another connection, does not. SERIALIZABLE
// transactional attempts so take turns on the job table: prefer REPEATABLE
// READ unless the handler needs SERIALIZABLE.
//
// Each open transaction holds one of the pool's connections. The service
// keeps two of them for its own statements (reading events, extending
// leases, recording outcomes), so at most the pool's MaxConns less two
// transactional attempts run at once, whatever the handlers' Concurrency;
// the others wait for a connection before their Timeout starts. A wait
// longer than the attempts ahead can take within their Timeouts and commits
// (one of them ignores its context, or its commit does not end) gives the
// attempt's lease back, uncounted, its handler not run, when other
// handlers' transactions held the slots: the job is due again at once, and
// the next consumer to take it runs it or waits as long again; the service
// logs it (warn, class transaction) and counts it (outcome given_back, see
// [Metrics]). When one of the handler's own transactions held its
// connection longer than an attempt may (its Timeout, commit, rollback and
// a LeaseExtend), the attempt fails (class transaction), so a hung
// handler's jobs still end in dead_letter. Size the pool for the transactions
// you want open at once (pool_max_conns in the database URL; pgx's default
// is the larger of 4 and the CPU count).
//
// tx runs as the consumer's database role (webhook_worker, or the team's
// consumer role): grant it what the handler writes. The handler must not
// use tx after returning; its Commit and Rollback return an error (the
// service ends the transaction). With the completion the service sets the
// transaction's idle_in_transaction_session_timeout to 15s (SET LOCAL; a
// stricter one in force is kept), so that a consumer frozen or cut off
// before its commit does not hold the job's row lock past it; the
// handler's own idle time is not bounded by the SDK.
type TxHandlerFunc func(ctx context.Context, tx pgx.Tx, e *Event) error

// ClassTransaction is the class of an attempt whose handler succeeded but
// whose transaction could not be committed with the job's completion; its
// writes were rolled back.
const ClassTransaction ErrorClass = "transaction"

// runTx runs h.TxFunc in a transaction and, when it returns nil, completes
// the job in that transaction and commits. For a transaction above READ
// COMMITTED (Handler.TxOptions, or the role's or database's default),
// stopExtending is called before it begins: the lease is then pushed out
// once, on the pool, far enough for the handler's Timeout and the
// completion, and nothing writes the job row while the transaction is open
// (an extension from another session would change it under the
// transaction's snapshot, and the completion then failed with 40001 on
// every attempt once the handler ran past one extension tick). At READ
// COMMITTED the lease is extended while the handler runs, and stopExtending
// is called before the completion.
//
// A transaction PostgreSQL aborted to resolve a conflict (a serialization
// failure or a deadlock's victim, 40001 or 40P01, raised in it: by the
// handler's statements, in a savepoint too, the completion or the commit) runs again after a
// short random pause, in a new transaction, within the same attempt and its
// Timeout: SERIALIZABLE attempts of different jobs abort each other through
// the job rows they complete, and of those that conflict one commits each
// round (reviews helper-79, helper-82). An error marked Permanent, or a
// 40001 the handler met elsewhere (its transaction not aborted), is not
// run again.
//
// It returns whether the attempt's own deadline passed; when the success
// was written (or fenced out), the outcome recorded with recorded true;
// why the handler was never called, when it was not (an attempt that must
// not count): no transaction slot came within txWait (notRunStarved),
// Stop's deadline came first (notRunStopped), or the handler's next start
// token comes later than the lease allows (notRunPaced: takeTxSlot); and
// the handler's error (or the transaction's, classed [ClassTransaction])
// with its verdict, read once (judge), to be recorded as a failed attempt.
func (s *Service) runTx(ctx context.Context, r *runner, ref bus.Ref, l lease, ev *Event, stopExtending func(), handlerDeadline *atomic.Int64) (timedOut bool, outcome string, recorded bool, why notRun, f failure) {
	h := r.h
	// A connection of the pool's share for handler transactions
	// (txReserve), before the handler's own clock starts: waiting for one
	// is not the handler's time, and the lease is extended meanwhile.
	// A wait past txWait is behind a transaction that does not end (a
	// handler ignoring its context, a commit that hangs). Another
	// handler's: this handler never ran, so its attempt is given back, not
	// spent (review helper-137: it was recorded as failed, class
	// transaction, and another handler's fault dead-lettered its job). This
	// handler's own (one of its attempts has held a slot longer than an
	// attempt may: txHoldLimit): the fault is its own, and the attempt
	// fails, class transaction, so its jobs still end in dead_letter (review
	// helper-151: given back, a hung handler's job was leased again for
	// ever). Its honest attempts holding slots while another handler's hung
	// ones pin the rest are no fault of its own (review helper-158).
	// A rate-limited handler takes its start token with the slot
	// (takeTxSlot).
	switch why = s.takeTxSlot(ctx, r); why {
	case ran:
		release := s.holdTx(h.Name)
		defer func() {
			release()
			<-s.txSlots
		}()
	case notRunStarved:
		stopExtending()
		if s.overdueTx(h.Name, txHoldLimit(h.Timeout, s.cfg.LeaseExtend)) {
			return false, "", false, ran, judge(WithClass(fmt.Errorf("no connection for the handler's transaction within %s: "+
				"its own transactions held them longer than their Timeouts and commits allow (a handler that ignores its context, or a commit that does not end)",
				s.txWait), ClassTransaction))
		}
		return false, "", false, why, failure{}
	default:
		stopExtending()
		return false, "", false, why, failure{}
	}
	// Above READ COMMITTED the lease is pushed out once before the
	// transaction and not extended while it is open: an extension from
	// another session would change the job row under its snapshot. At READ
	// COMMITTED it is extended as for any handler, so a dead consumer's
	// job comes back within lease_extend, not its Timeout.
	snapshot := s.txDefaultAboveRC || h.TxOptions.IsoLevel == pgx.RepeatableRead || h.TxOptions.IsoLevel == pgx.Serializable
	if snapshot {
		stopExtending()
	}
	deadline := time.Now().Add(h.Timeout) // the attempt's, whatever runs again
	handlerDeadline.Store(deadlineNanos(deadline))
	for try := 1; ; try++ {
		var rerun bool
		// A run again begins with the extender stopped (by the last run).
		timedOut, outcome, recorded, f, rerun = s.runTxOnce(ctx, h, ref, l, ev, deadline, snapshot || try > 1, stopExtending)
		if !rerun || f.permanent || ctx.Err() != nil {
			return timedOut, outcome, recorded, ran, f
		}
		pause := time.Duration(1+rand.IntN(20*min(try, 10))) * time.Millisecond //nolint:gosec // G404: jitter
		if time.Until(deadline) <= pause {
			return timedOut, outcome, recorded, ran, f
		}
		s.logger.LogAttrs(ctx, slog.LevelDebug, "handler's transaction aborted by a serialization failure or a deadlock; running it again",
			slog.Int64("job_id", ref.JobID), slog.Int("attempt", ref.Attempt), slog.Int("try", try))
		select {
		case <-time.After(pause):
		case <-ctx.Done():
			return timedOut, outcome, recorded, ran, f
		}
	}
}

// notRun says whether an attempt's handler was called (ran), and if not,
// why: each of these attempts is given back uncounted (attempt).
type notRun int

const (
	ran           notRun = iota // the handler was called (or the attempt failed waiting: runTx's f)
	notRunStopped               // Stop's deadline came first
	notRunStarved               // no transaction slot within txWait (giveBackStarved)
	notRunPaced                 // the handler's next start token comes later than the lease allows (giveBackPaced)
)

// takeTxSlot takes a transaction slot (txSlots) for an attempt of r and,
// for a rate-limited handler, a token of its bucket (runner.pace) with it,
// the slot held: the token is taken where the handler starts, so in any
// time t the process calls it at most Burst + RateLimit·t times. Taken
// before the slot, tokens gathered while the slots were busy (a stalled
// downstream in the handler's own transactions, or another handler's) and
// the attempts holding them called the handler back to back once slots
// freed (review helper-338). Left between the token and the call: above
// READ COMMITTED the extender stopped and the lease pushed out once, and
// the BEGIN (runTxOnce), each one round trip; a run again after a
// conflict (40001, 40P01) is the same start, and takes no token.
//
// It never holds a transaction slot while it waits for a token, which may
// take up to LeaseExtend/2 at a slow rate: the slots are shared by every
// transactional handler of the process, and one held idle would hold the
// others' transactions back (and their waits count toward their txWait).
// So the attempt whose turn it is (runner.paceTurn) waits for a token
// without taking it (awaitToken), then tries for a slot; when none is
// free it gives up its turn, the token left in the bucket, and waits for a
// slot as any transactional attempt does; with the slot, it takes a token
// if one is there, and otherwise (another attempt of the handler took it
// first) gives the slot back and waits for its turn again. The next token
// is so never more than a token's interval away: one due later than
// LeaseExtend/2 reports notRunPaced at once, as for any handler (takeToken).
//
// txWait bounds each wait for a slot, from when it began: a wait that got
// a slot but no token proved the slots free up. It reports ran with the
// slot held, notRunStopped when ctx ended first (Stop's deadline), and
// notRunStarved when a wait for a slot passed txWait, no slot held then.
func (s *Service) takeTxSlot(ctx context.Context, r *runner) notRun {
	for {
		if r.pace != nil {
			if why, got := s.txSlotOnTurn(ctx, r); got || why != ran {
				return why
			}
		}
		wait := time.NewTimer(s.txWait)
		select {
		case s.txSlots <- struct{}{}:
			wait.Stop()
		case <-ctx.Done():
			wait.Stop()
			return notRunStopped
		case <-wait.C:
			return notRunStarved
		}
		if r.pace == nil || r.pace.Allow() {
			return ran
		}
		<-s.txSlots
	}
}

// txSlotOnTurn is takeTxSlot's wait on r's turn: it waits for the turn and
// a token, and takes a slot and the token when a slot is free. got says it
// did (why ran); why other than ran says the attempt is not run; neither,
// that no slot was free, and the turn was given up, the token left.
func (s *Service) txSlotOnTurn(ctx context.Context, r *runner) (why notRun, got bool) {
	select {
	case r.paceTurn <- struct{}{}:
	case <-ctx.Done():
		return notRunStopped, false
	}
	defer func() { <-r.paceTurn }()
	for {
		switch s.awaitToken(ctx, r) {
		case tokenDone:
			return notRunStopped, false
		case tokenLate:
			return notRunPaced, false
		}
		select {
		case s.txSlots <- struct{}{}:
		default:
			return ran, false
		}
		if r.pace.Allow() {
			return ran, true
		}
		<-s.txSlots // an attempt that waited for a slot took the token: wait for the next one, the turn kept
	}
}

// runTxOnce is one run of runTx: the lease pushed out, the transaction, the
// handler, the completion and the commit, the handler's context ending at
// deadline. rerun says the transaction was aborted by a conflict. The
// handler's error is judged once, right after it returns: its chain is the
// handler's code (judge).
func (s *Service) runTxOnce(ctx context.Context, h Handler, ref bus.Ref, l lease, ev *Event, deadline time.Time, upfront bool, stopExtending func()) (timedOut bool, outcome string, recorded bool, f failure, rerun bool) {
	// upfront: the lease covers the whole transaction, the handler's time
	// left, then the completion and the commit (recordTimeout), from now. A
	// consumer that dies or is cut off meanwhile holds no lock: the lease
	// runs out and the reaper takes the job back, as for any handler.
	if upfront {
		if _, err := s.extendFor(ctx, ref, l, satAdd(time.Until(deadline), recordTimeout+time.Second)); errors.Is(err, pgx.ErrNoRows) {
			s.logger.LogAttrs(ctx, slog.LevelDebug, "handler not run: the job's lease was lost before its transaction began",
				slog.Int64("job_id", ref.JobID), slog.Int("attempt", ref.Attempt))
			return false, "", true, failure{}, false
		} else if err != nil {
			return false, "", false, judge(WithClass(fmt.Errorf("extend the lease of job %d for the handler's transaction: %w", ref.JobID, err), ClassTransaction)), false
		}
	}
	actx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	began := time.Now() // before its transaction begins: the completion's completed_at
	tx, err := s.cfg.Pool.BeginTx(actx, h.TxOptions)
	if err != nil {
		stopExtending()
		return false, "", false, judge(WithClass(fmt.Errorf("begin the handler's transaction: %w", err), ClassTransaction)), false
	}
	// Whatever is not committed below is rolled back, on a context of its
	// own: the handler's may have ended.
	defer func() {
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer rcancel()
		_ = tx.Rollback(rctx) // after Commit it is a no-op (pgx.ErrTxClosed); a failed rollback closes the connection, which rolls back too
	}()
	raised := &conflicts{}
	f = judge(callTx(actx, h.TxFunc, handlerTx{watchedTx{Tx: tx, raised: raised}}, ev))
	timedOut = errors.Is(actx.Err(), context.DeadlineExceeded) && ctx.Err() == nil
	// Before the completion takes the job's row lock: an extension waiting
	// on it would read the completed row as a lost lease.
	stopExtending()
	if f.err != nil {
		// Run again only for a conflict raised in this transaction: it is
		// the one aborted ('E': failed, waiting for its rollback), or one
		// of its statements returned the error the handler returns (in a
		// savepoint, pgx.BeginFunc(ctx, tx, …), which pgx rolled back to,
		// so the transaction is not aborted: review helper-221). Not for a
		// 40001 the handler met on another connection.
		aborted := tx.Conn().PgConn().TxStatus() == 'E'
		return timedOut, "", false, f, f.conflict && (aborted || raised.returned(f.err))
	}
	if tx.Conn().PgConn().TxStatus() == 'I' {
		// The handler ended its transaction itself: a COMMIT or ROLLBACK
		// sent as SQL, or a transaction begun and ended on tx.Conn() (a
		// library's). Completed now, the job would be completed outside
		// the transaction, unfenced, and with the handler's writes rolled
		// back or committed without it.
		return timedOut, "", false, judge(WithClass(fmt.Errorf("the handler ended its transaction itself (COMMIT or ROLLBACK as SQL, or a transaction begun on tx.Conn()): "+
			"job %d is not completed with it; its writes may have committed without the completion or been rolled back", ref.JobID), ClassTransaction)), false
	}

	// The completion and the commit get their own deadline, as record does.
	// From the completion on, the transaction holds the job's row lock,
	// which the reaper skips: the completion bounds, in the same round
	// trip, how long the session may then sit idle (idleBounded), so that
	// a consumer frozen before its COMMIT does not hold the job past its
	// lease (review helper-221). Not at BEGIN: the handler may
	// legitimately be idle in its transaction between its statements.
	rctx, rcancel := context.WithTimeout(context.WithoutCancel(s.workCtx), recordTimeout)
	defer rcancel()
	done, err := s.completeJobsOn(rctx, idleBounded{tx}, []completion{{ref: ref, l: l}})
	if err != nil {
		return timedOut, "", false, judge(WithClass(fmt.Errorf("complete job %d in the handler's transaction: %w", ref.JobID, err), ClassTransaction)), conflict(err)
	}
	if !done[ref.JobID] {
		// Lost lease: the rollback throws the handler's writes away.
		s.logger.LogAttrs(ctx, slog.LevelDebug, "handler's transaction rolled back: the job's lease was lost",
			slog.Int64("job_id", ref.JobID), slog.Int("attempt", ref.Attempt))
		return timedOut, "", true, failure{}, false
	}
	if err := tx.Commit(rctx); err != nil {
		// Not committed, or not known to be: recorded as a failure, which
		// is fenced like any outcome, so a commit that did land stays the
		// job's outcome. A conflict at the commit is PostgreSQL's refusal:
		// nothing committed, so it runs again.
		return timedOut, "", false, judge(WithClass(fmt.Errorf("commit the handler's transaction with job %d's completion: %w", ref.JobID, err), ClassTransaction)), conflict(err)
	}
	s.completed.Add(1)
	s.succeeded([]completion{{ref: ref, l: l}}, began)
	return timedOut, "completed", true, failure{}, false
}

// handlerTx is the transaction as the handler sees it: it may not end it.
// Committing would commit the handler's writes without the job's
// completion (run again by the next attempt). Its statements, and those of
// the savepoints begun on it, report the conflicts they raise (watchedTx).
type handlerTx struct{ watchedTx }

var errHandlerEndsTx = errors.New("a transactional handler must not commit or roll back its transaction: return nil to commit, an error to roll back")

func (handlerTx) Commit(context.Context) error   { return errHandlerEndsTx }
func (handlerTx) Rollback(context.Context) error { return errHandlerEndsTx }

// conflicts are the conflict errors (40001, 40P01) the statements of one
// handler transaction returned, savepoints included: a handler that returns
// one of them returns a conflict raised in its transaction, though the
// transaction is no longer aborted once a savepoint was rolled back.
type conflicts struct {
	mu   sync.Mutex
	errs []error
}

// note remembers err when it is a conflict, and returns it.
func (c *conflicts) note(err error) error {
	if err == nil || !conflict(err) {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range c.errs {
		if errors.Is(e, err) {
			return err // seen again (rows' Next, Close and Err report one error)
		}
	}
	c.errs = append(c.errs, err)
	return err
}

// returned reports whether err is, or wraps, a conflict noted; false when
// walking err's chain, the handler's code, panics (judge).
func (c *conflicts) returned(err error) (found bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	defer func() {
		if p := recover(); p != nil {
			found = false
		}
	}()
	for _, e := range c.errs {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// watchedTx is a handler's transaction, or a savepoint of it, whose
// statements note the conflicts they raise in raised. Statements sent on
// tx.Conn() are not seen; a conflict there leaves the transaction aborted,
// which runTxOnce sees.
type watchedTx struct {
	pgx.Tx
	raised *conflicts
}

func (t watchedTx) Begin(ctx context.Context) (pgx.Tx, error) {
	sp, err := t.Tx.Begin(ctx)
	if err != nil {
		return nil, t.raised.note(err)
	}
	return watchedTx{Tx: sp, raised: t.raised}, nil
}

func (t watchedTx) Commit(ctx context.Context) error { return t.raised.note(t.Tx.Commit(ctx)) }

func (t watchedTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	tag, err := t.Tx.Exec(ctx, sql, args...)
	return tag, t.raised.note(err)
}

func (t watchedTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	rows, err := t.Tx.Query(ctx, sql, args...)
	if err != nil {
		return rows, t.raised.note(err)
	}
	return watchedRows{Rows: rows, raised: t.raised}, nil
}

func (t watchedTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return watchedRow{row: t.Tx.QueryRow(ctx, sql, args...), raised: t.raised}
}

func (t watchedTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	return watchedBatch{BatchResults: t.Tx.SendBatch(ctx, b), raised: t.raised}
}

func (t watchedTx) CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, src pgx.CopyFromSource) (int64, error) {
	n, err := t.Tx.CopyFrom(ctx, table, columns, src)
	return n, t.raised.note(err)
}

// watchedRows notes the conflict a query's rows end with.
type watchedRows struct {
	pgx.Rows
	raised *conflicts
}

func (r watchedRows) Next() bool {
	if r.Rows.Next() {
		return true
	}
	_ = r.raised.note(r.Rows.Err()) // noted; Err reports it
	return false
}

func (r watchedRows) Close() {
	r.Rows.Close()
	_ = r.raised.note(r.Rows.Err()) // noted; Err reports it
}

func (r watchedRows) Err() error { return r.raised.note(r.Rows.Err()) }

// watchedRow notes the conflict a QueryRow's Scan returns.
type watchedRow struct {
	row    pgx.Row
	raised *conflicts
}

func (r watchedRow) Scan(dest ...any) error { return r.raised.note(r.row.Scan(dest...)) }

// watchedBatch notes the conflicts a batch's results return.
type watchedBatch struct {
	pgx.BatchResults
	raised *conflicts
}

func (b watchedBatch) Exec() (pgconn.CommandTag, error) {
	tag, err := b.BatchResults.Exec()
	return tag, b.raised.note(err)
}

func (b watchedBatch) Query() (pgx.Rows, error) {
	rows, err := b.BatchResults.Query()
	if err != nil {
		return rows, b.raised.note(err)
	}
	return watchedRows{Rows: rows, raised: b.raised}, nil
}

func (b watchedBatch) QueryRow() pgx.Row {
	return watchedRow{row: b.BatchResults.QueryRow(), raised: b.raised}
}

func (b watchedBatch) Close() error { return b.raised.note(b.BatchResults.Close()) }

// boundIdleSQL bounds how long the session may sit idle in the rest of its
// transaction (SET LOCAL: until COMMIT or ROLLBACK) to recordTimeout, the
// most the SDK itself waits for the statements and the commit that follow;
// a stricter bound already in force (the role's, the database's, the
// handler's own SET LOCAL) is kept. PostgreSQL then ends a session whose
// client froze (SIGSTOP, a paused VM, a partition that closes nothing)
// before its COMMIT, which rolls the transaction back and frees the job's
// row lock, which the reaper's FOR UPDATE SKIP LOCKED would skip for as
// long as TCP takes to notice (hours; never, for a stopped process).
var boundIdleSQL = fmt.Sprintf(`SELECT set_config('idle_in_transaction_session_timeout', '%[1]dms', true)
WHERE current_setting('idle_in_transaction_session_timeout')::interval NOT BETWEEN '1 microsecond' AND '%[1]dms'`,
	recordTimeout.Milliseconds())

// idleBounded runs a statement in a transaction after boundIdleSQL, both in
// one batch: one round trip, as the statement alone.
type idleBounded struct{ tx pgx.Tx }

func (q idleBounded) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	b := &pgx.Batch{}
	b.Queue(boundIdleSQL)
	b.Queue(sql, args...)
	br := q.tx.SendBatch(ctx, b)
	if _, err := br.Exec(); err != nil {
		_ = br.Close()
		return nil, fmt.Errorf("bound the transaction's idle time (idle_in_transaction_session_timeout): %w", err)
	}
	rows, err := br.Query()
	if err != nil {
		_ = br.Close()
		return nil, err
	}
	return &batchRows{Rows: rows, br: br}, nil
}

// batchRows are the rows of a batch's last statement; closing them closes
// the batch, whose error Err then reports.
type batchRows struct {
	pgx.Rows
	br     pgx.BatchResults
	closed bool
	err    error
}

func (r *batchRows) Next() bool {
	if r.Rows.Next() {
		return true
	}
	r.Close()
	return false
}

func (r *batchRows) Close() {
	if r.closed {
		return
	}
	r.closed = true
	r.Rows.Close()
	r.err = r.br.Close()
}

func (r *batchRows) Err() error {
	if err := r.Rows.Err(); err != nil {
		return err
	}
	return r.err
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

// txHold is one txSlots place held, since when.
type txHold struct{ since time.Time }

// holdTx records a txSlots place taken by an attempt of handler; the
// function it returns gives it up.
func (s *Service) holdTx(handler string) (release func()) {
	hold := &txHold{since: time.Now()}
	s.txHeldMu.Lock()
	defer s.txHeldMu.Unlock()
	if s.txHeld == nil {
		s.txHeld = map[string]map[*txHold]struct{}{}
	}
	if s.txHeld[handler] == nil {
		s.txHeld[handler] = map[*txHold]struct{}{}
	}
	s.txHeld[handler][hold] = struct{}{}
	return func() {
		s.txHeldMu.Lock()
		defer s.txHeldMu.Unlock()
		delete(s.txHeld[handler], hold)
		if len(s.txHeld[handler]) == 0 {
			delete(s.txHeld, handler)
		}
	}
}

// overdueTx reports whether an attempt of handler has held its txSlots
// place longer than limit.
func (s *Service) overdueTx(handler string, limit time.Duration) bool {
	s.txHeldMu.Lock()
	defer s.txHeldMu.Unlock()
	for hold := range s.txHeld[handler] {
		if time.Since(hold.since) > limit {
			return true
		}
	}
	return false
}

// txHoldLimit is the longest an honest attempt of a handler whose Timeout is
// timeout holds a txSlots place: its Timeout, its completion and commit, a
// rollback and a LeaseExtend (one round of txWaitBound).
func txHoldLimit(timeout, leaseExtend time.Duration) time.Duration {
	return satAdd(satAdd(timeout, recordTimeout+giveBackTimeout), leaseExtend)
}
