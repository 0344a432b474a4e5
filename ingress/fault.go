package ingress

import (
	"cmp"
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"
)

// storeFault is what a failed Store.Insert means for the provider.
type storeFault int

const (
	// faultNotStored: the write is known not to have committed (never sent,
	// or the server refused the statement, which rolled it back) and the
	// cause may pass (database down, shutting down, privileges being
	// fixed): 503, the provider retries.
	faultNotStored storeFault = iota
	// faultUnknown: the write was sent and its answer never came (the store
	// timeout fired, the connection was lost, the server was stopped): the
	// transaction may still commit. 503 all the same, and the provider's
	// retry is then answered "duplicate".
	faultUnknown
	// faultPermanent: the same event would fail the same way on every
	// retry (a field over its limit, data the database refuses): 4xx.
	faultPermanent
)

// errNotWritten marks an insert given up before any of it reached the
// database (waiting for a pool connection, or queued for a batch).
var errNotWritten = errors.New("not written")

// errOverloaded marks an insert given up, before any of it reached the
// database, for want of memory: no room to parse its body for the
// subscription filters within the store timeout. Answered as a body that
// found no room in the budget: 503 overloaded.
var errOverloaded = errors.New("overloaded")

// classify says what err from Store.Insert means. What it cannot place is
// outcome unknown: the one answer that is never wrong.
func classify(err error) storeFault {
	if errors.Is(err, ErrUnstorable) {
		return faultPermanent
	}
	if errors.Is(err, errNotWritten) || errors.Is(err, ErrStoreClosed) {
		return faultNotStored
	}
	if errors.Is(err, errPastDeadline) {
		return faultUnknown
	}
	var connErr *pgconn.ConnectError
	if errors.As(err, &connErr) {
		return faultNotStored
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		if sessionEnded(pgErr) {
			// The server ended the session (shutdown, crash) while the
			// statement ran: it may have committed first.
			return faultUnknown
		}
		// An ERROR fails the statement and rolls its implicit transaction
		// back.
		if permanentSQLState(pgErr.Code) {
			return faultPermanent
		}
		return faultNotStored
	}
	if pgconn.SafeToRetry(err) {
		return faultNotStored // pgx knows nothing was sent
	}
	return faultUnknown
}

// errPastDeadline marks a write whose context (store_timeout, or shutdown's
// cut) ended before PostgreSQL answered it: outcome unknown (classify),
// as a 503 after a timeout always is, whatever the answer then said. The
// pool sends a cancel request when the context ends (internal/database):
// the statement then fails (57014) and rolls back, or, its COMMIT waiting
// for a synchronous standby, is reported done though committed only on the
// primary (a WARNING), which a failover loses; never a 2xx.
var errPastDeadline = errors.New("past its deadline")

// answeredLate is the error of a write PostgreSQL answered with err (nil:
// reported committed) after ctx ended, or after a cancel request ctx's end
// sent (57014); nil for a write answered in time, whose err stands.
func answeredLate(ctx context.Context, err error) error {
	if ctx.Err() == nil || (err != nil && !cancelled(err)) {
		return nil
	}
	if err == nil {
		return fmt.Errorf("%w (%w): reported committed late, possibly only on the primary (a cancelled wait for a synchronous standby)",
			errPastDeadline, ctx.Err())
	}
	return fmt.Errorf("%w (%w): %w", errPastDeadline, ctx.Err(), err)
}

// cancelled reports a statement PostgreSQL cancelled (57014
// query_canceled): a cancel request, or statement_timeout.
func cancelled(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "57014"
}

// permanentSQLState reports the SQLSTATEs caused by the event's own data:
// class 22 (data exception: invalid text, out-of-range values) and class 54
// (program limit exceeded: an index row too large). A privilege, a missing
// table or a constraint is the operator's to fix, and a retry may then pass.
func permanentSQLState(code string) bool {
	return len(code) == 5 && (code[:2] == "22" || code[:2] == "54")
}

// unstorable wraps err, a statement the server refused because of the
// event's data, so classify and callers see ErrUnstorable.
func unstorable(err error) error {
	if refusedData(err) {
		return fmt.Errorf("%w: %w", ErrUnstorable, err)
	}
	return err
}

// refusedData reports a statement the server refused because of the data
// it was given (permanentSQLState): the one kind of error a write without
// the event's JSON copy may not meet again. A cancel (57014: a DBA's
// pg_cancel_backend, a statement_timeout, a late cancel request), a lock or
// a read-only server is not the copy's fault, and a retry without it would
// keep the event with payload NULL for good (review helper-304).
func refusedData(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && !sessionEnded(pgErr) && permanentSQLState(pgErr.Code)
}

// sessionEnded reports an error that ended the session rather than the
// statement (FATAL, PANIC).
func sessionEnded(e *pgconn.PgError) bool {
	switch cmp.Or(e.SeverityUnlocalized, e.Severity) {
	case "FATAL", "PANIC":
		return true
	}
	return false
}

// isStatementError reports an error the server raised for the statement
// alone (severity ERROR): it rolled back, and the session is still usable.
func isStatementError(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && !sessionEnded(pgErr)
}

// batchWide reports a statement error that no one event of a group-commit
// batch caused, so storing each event alone would fail the same way, one
// wait after another: a lock or statement timeout or a lock not available
// (class 55, 57), a read-only or otherwise unusable transaction (25), a
// privilege or a schema object missing (42: the same statement for every
// event), a system error (58). The batch's callers all get the error.
func batchWide(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || len(pgErr.Code) != 5 {
		return false
	}
	switch pgErr.Code[:2] {
	case "25", "42", "55", "57", "58":
		return true
	}
	return false
}
