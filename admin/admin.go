package admin

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/internal/database"
)

// DB is what the functions need: a *pgxpool.Pool (or *pgx.Conn) connected as
// webhook_operator (database.Open with Options.Role).
type DB interface {
	BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error)
}

// Errors callers branch on (the API maps them to 404, 400 and 409).
var (
	// ErrNotFound means the event, job or handler asked for does not exist.
	ErrNotFound = errors.New("not found")
	// ErrInvalid means the request itself is wrong: a bad filter, a missing
	// or contradictory argument.
	ErrInvalid = errors.New("invalid request")
	// ErrConflict means the request is valid but the state forbids it now
	// (replaying a job that is leased; re-verifying an event stored without
	// a signature), or it is larger than allowed.
	ErrConflict = errors.New("conflict")
)

// kindError is one of the sentinel errors (errors.Is) whose message is only
// what is wrong, so it reads well after the flag or id it is about.
type kindError struct {
	kind error
	msg  string
}

func (e *kindError) Error() string        { return e.msg }
func (e *kindError) Is(target error) bool { return target == e.kind }

func invalid(format string, args ...any) error {
	return &kindError{kind: ErrInvalid, msg: fmt.Sprintf(format, args...)}
}

func notFound(format string, args ...any) error {
	return &kindError{kind: ErrNotFound, msg: fmt.Sprintf(format, args...)}
}

func conflict(format string, args ...any) error {
	return &kindError{kind: ErrConflict, msg: fmt.Sprintf(format, args...)}
}

// Page sizes.
const (
	// DefaultLimit is the page size of the list functions when none is given.
	DefaultLimit = 50
	// MaxLimit is the largest page a list function returns.
	MaxLimit = 1000
	// batchSize bounds the rows one statement of a replay or a
	// re-verification touches.
	batchSize = 500
	// batchBytes bounds the stored bodies and the headers (as JSON text)
	// one page of a re-verification or a filtered catch-up reads (past its
	// first row), which the admin API holds inside the ingress process: 500
	// bodies of max_body_bytes would not be bounded.
	batchBytes = 8 << 20
)

// lastPage reports whether a page of returned rows, cut by bytes from the
// pageRows its query selected (batchSize at most), was the last: nothing
// returned, or a page neither full nor cut. The reader otherwise goes on
// after the last row returned.
func lastPage(returned int, pageRows int64) bool {
	return returned == 0 || (pageRows < batchSize && int(pageRows) == returned)
}

// checkPage validates a list request's page and time range and returns the
// page size; what names the kind of id Before is ("event", "job").
func checkPage(limit int, before int64, what string, since, until time.Time) (int, error) {
	n, err := pageLimit(limit)
	if err != nil {
		return 0, err
	}
	if before < 0 {
		return 0, invalid("before %d: must be a positive %s id", before, what)
	}
	if err := checkRange(since, until); err != nil {
		return 0, err
	}
	return n, nil
}

func pageLimit(n int) (int, error) {
	switch {
	case n == 0:
		return DefaultLimit, nil
	case n < 0 || n > MaxLimit:
		return 0, invalid("limit %d: must be between 1 and %d", n, MaxLimit)
	}
	return n, nil
}

// readTx runs f in a read-only REPEATABLE READ transaction: everything f reads
// is one snapshot.
func readTx(ctx context.Context, db DB, f func(pgx.Tx) error) error {
	return ended(ctx, pgx.BeginTxFunc(ctx, db, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		if err := setLocals(ctx, tx); err != nil {
			return err
		}
		return f(tx)
	}))
}

// writeTx runs f in a READ COMMITTED read-write transaction, so row locks
// (FOR UPDATE) see and wait for concurrent streamers and consumers.
func writeTx(ctx context.Context, db DB, f func(pgx.Tx) error) error {
	return ended(ctx, pgx.BeginTxFunc(ctx, db, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error {
		if err := setLocals(ctx, tx); err != nil {
			return err
		}
		return f(tx)
	}))
}

// setLocals sets, in one round trip, what every transaction of the package
// runs with: the optional-filter queries (an argument left empty matches
// every row) planned for the values given, never with a generic plan that
// must serve every combination; and each statement bounded by the time ctx
// (the request's timeout) has left, so PostgreSQL stops it there itself
// should the cancel request the pool sends when ctx ends not reach it: a
// timed-out request's statement kept a backend busy to its end, and each
// retry started another (review helper-295).
func setLocals(ctx context.Context, tx pgx.Tx) error {
	sql := "SET LOCAL plan_cache_mode = force_custom_plan"
	if timeout := database.LocalStatementTimeout(ctx); timeout != "" {
		sql += ";\n" + timeout
	}
	if _, err := tx.Exec(ctx, sql); err != nil {
		return fmt.Errorf("set plan_cache_mode and statement_timeout: %w", err)
	}
	return nil
}

// ended adds to err, when ctx ended before it came, that the request's
// time ran out (or its client left): a statement the pool cancelled then
// fails "canceling statement due to user request", which does not say so.
func ended(ctx context.Context, err error) error {
	if err != nil && ctx.Err() != nil && !errors.Is(err, ctx.Err()) {
		return fmt.Errorf("%w (%w)", err, ctx.Err())
	}
	return err
}

// nullTime is t for a timestamptz parameter, NULL when zero.
func nullTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// globLike turns a glob ('*' matches any run of characters, nothing else is
// special) into a LIKE pattern, escaping as the subscriptions table does.
// "" stays "" (no filter).
func globLike(glob string) string {
	r := strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`, `*`, `%`)
	return r.Replace(glob)
}

// ParseTime reads a time bound as operators write it: an RFC 3339 time
// ("2026-03-03T09:00:00Z", "2026-03-03T09:00:00+01:00"), a date
// ("2026-03-03", midnight UTC), "now" (now itself: the moment of the
// command or request, as "0s" is), or a duration back from now ("24h",
// "90m", "7d"). "" is the zero time (no bound).
func ParseTime(s string, now time.Time) (time.Time, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return time.Time{}, nil
	}
	// The usage lines show it (inlet reconcile stripe --until now), and a
	// script writes it more readily than 0s.
	if isNow(s) {
		return now, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	if t, err := time.Parse(time.DateOnly, s); err == nil {
		return t, nil
	}
	if days, ok := strings.CutSuffix(s, "d"); ok {
		if n, err := strconv.Atoi(days); err == nil && n >= 0 && n <= maxDays {
			return now.Add(-time.Duration(n) * 24 * time.Hour), nil
		}
	}
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	return time.Time{}, invalid("time %q: want RFC 3339 (2026-03-03T09:00:00Z), a date (2026-03-03), now, or a duration back from now (24h, 7d)", s)
}

// isNow reports whether s (trimmed) is the bound "now", in any case.
func isNow(s string) bool { return strings.EqualFold(s, "now") }

// maxDays is the most days a bound may count back: a Duration holds about
// 292 years, and more wrapped into the future (106752d read as 2319, and a
// replay "until" it re-queued everything).
const maxDays = int(math.MaxInt64 / int64(24*time.Hour))

// RelativeTime reports whether s, as ParseTime reads it, counts back from
// now (24h, 7d, now itself) rather than naming a time.
func RelativeTime(s string) bool {
	s = strings.TrimSpace(s) // as ParseTime reads it
	if isNow(s) {
		return true
	}
	if days, ok := strings.CutSuffix(s, "d"); ok {
		if n, err := strconv.Atoi(days); err == nil && n >= 0 && n <= maxDays {
			return true
		}
	}
	d, err := time.ParseDuration(s)
	return err == nil && d >= 0
}

func checkRange(since, until time.Time) error {
	if !since.IsZero() && !until.IsZero() && !since.Before(until) {
		return invalid("since (%s) must be before until (%s)", since.Format(time.RFC3339), until.Format(time.RFC3339))
	}
	return nil
}
