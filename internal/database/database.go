// Package database opens Inlet's PostgreSQL connection pools: one per service,
// each assuming that service's least-privilege role (SET ROLE) on every new
// connection, so a service can do only what its role's grants allow even when
// its login role could do more, committing durably (synchronous_commit
// at least on, whatever the database's default), and cancelling in
// PostgreSQL a statement whose context ended (a cancel request, not only a
// cut socket).
package database

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inlet-dev/inlet/schema"
)

// Options tunes Open.
type Options struct {
	// Role is assumed with SET ROLE on every new connection. Empty keeps the
	// login role.
	Role string
	// MaxConns caps the pool. Defaults to pgxpool's (max(4, cores)).
	MaxConns int32
	// AppName is reported as application_name (visible in pg_stat_activity).
	// Defaults to "inlet".
	AppName string
}

// durableCommit raises the session's synchronous_commit to on when it is
// weaker (off, local, remote_write), in one round trip.
const durableCommit = `SELECT pg_catalog.set_config('synchronous_commit', 'on', false)
WHERE pg_catalog.current_setting('synchronous_commit') IN ('off', 'local', 'remote_write')`

// Open returns a pool for url. It does not wait for the server: a pool opened
// while Postgres is down connects once it is back.
func Open(ctx context.Context, url string, opts Options) (*pgxpool.Pool, error) {
	if url == "" {
		return nil, errors.New("no database URL: set database_url in the config file or DATABASE_URL")
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		// pgx's message may quote the URL, password included: say only what is wrong.
		return nil, errors.New("database URL is not a valid PostgreSQL connection string")
	}
	if opts.MaxConns > 0 {
		cfg.MaxConns = opts.MaxConns
	}
	if cfg.ConnConfig.RuntimeParams["application_name"] == "" {
		name := opts.AppName
		if name == "" {
			name = "inlet"
		}
		cfg.ConnConfig.RuntimeParams["application_name"] = name
	}
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = 5 * time.Second
	}
	cfg.HealthCheckPeriod = 5 * time.Second
	cfg.ConnConfig.BuildContextWatcherHandler = cancelOnContextEnd
	cfg.AfterRelease = func(c *pgx.Conn) bool { return !cancelSent(c.PgConn()) }
	role := opts.Role
	cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
		if role != "" {
			if _, err := c.Exec(ctx, "SET ROLE "+pgx.Identifier{role}.Sanitize()); err != nil {
				return fmt.Errorf("set role %s (is the login role a member of it? GRANT %s TO <login role>): %w", role, role, err)
			}
		}
		// A 2xx, a lease and an outcome are promised only once committed
		// durably: a database, role or URL that lowered synchronous_commit
		// (a common throughput tuning) would let ingress acknowledge an
		// event a crash then loses. Raised to on; remote_apply, stronger,
		// is kept.
		if _, err := c.Exec(ctx, durableCommit); err != nil {
			return fmt.Errorf("raise synchronous_commit to on: %w", err)
		}
		return nil
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open database pool: %w", err)
	}
	return pool, nil
}

// DefaultCancelWait is how long a statement whose context ended waits for
// PostgreSQL to answer the cancel request the pool sends (the statement's
// error) before its connection is dropped, unless WithCancelWait says
// otherwise. Short: ingress writes its 503 within 2 s of store_timeout, and
// a server that answers nothing has been sent the cancel request all the
// same.
const DefaultCancelWait = time.Second

type cancelWaitKey struct{}

// WithCancelWait returns ctx under which a statement, once ctx ends, waits
// up to d (instead of DefaultCancelWait) for PostgreSQL to answer the cancel
// request before its connection is dropped. For a caller that must not
// answer while its statement still runs: PostgreSQL takes a cancel only
// between steps of a statement, and some (a JSON path comparing two long
// arrays) compute for many seconds without one; a dropped connection
// leaves that backend running while the pool opens another in its place.
func WithCancelWait(ctx context.Context, d time.Duration) context.Context {
	return context.WithValue(ctx, cancelWaitKey{}, d)
}

// cancelOnContextEnd makes a context that ends while a statement runs send
// PostgreSQL a cancel request at once, so the statement stops there too.
// pgx's default only cut the socket: PostgreSQL does not notice a dropped
// client while a statement computes, so a request past its timeout (a
// heavy admin --where, say) kept a backend busy to the end, and each retry
// started another beyond the pool's size (review helper-295). The socket is
// still cut should no answer come within the context's cancel wait
// (WithCancelWait, DefaultCancelWait).
//
// A cancelled statement fails with 57014 (IsUnavailable). A COMMIT whose
// wait for a synchronous standby is cancelled is reported done, committed
// only locally (a WARNING): a caller that acknowledges durability outside
// must read a success that returns after its context ended as outcome
// unknown (ingress does).
//
// A cancel request names the backend, not the statement, and may reach the
// server after the statement it was sent for has finished (pgx waits only
// 100 ms; a pooler, a proxy or a busy postmaster can take longer): the
// connection's next statement would then be cancelled in its place. So a
// connection a cancel request was sent on never goes back to the pool
// (cancelSent, the pool's AfterRelease) but is closed, as the socket cut
// closed it before (review helper-304). One held across statements with
// Acquire keeps that risk until it is released.
func cancelOnContextEnd(c *pgconn.PgConn) ctxwatch.Handler {
	h := &cancelHandler{CancelRequestContextWatcherHandler: pgconn.CancelRequestContextWatcherHandler{Conn: c}}
	c.CustomData()[cancelSentKey] = &h.sent
	return h
}

// cancelHandler is pgconn's CancelRequestContextWatcherHandler (the cancel
// request sent at once) waiting as long as the ended context says.
type cancelHandler struct {
	pgconn.CancelRequestContextWatcherHandler
	sent atomic.Bool
}

func (h *cancelHandler) HandleCancel(ctx context.Context) {
	h.sent.Store(true)
	h.DeadlineDelay = DefaultCancelWait
	if d, ok := ctx.Value(cancelWaitKey{}).(time.Duration); ok && d > 0 {
		h.DeadlineDelay = d
	}
	h.CancelRequestContextWatcherHandler.HandleCancel(ctx)
}

// cancelSentKey holds, in a connection's CustomData, whether a cancel
// request was ever sent on it.
const cancelSentKey = "inlet.database.cancel_sent"

// cancelSent reports whether a cancel request was sent on c: a late one
// could cancel its next statement.
func cancelSent(c *pgconn.PgConn) bool {
	sent, _ := c.CustomData()[cancelSentKey].(*atomic.Bool)
	return sent != nil && sent.Load()
}

// LocalStatementTimeout returns the statement that bounds each later
// statement of the current transaction by the time left before ctx's
// deadline (statement_timeout, SET LOCAL, rounded up to a millisecond),
// unless the session's own statement_timeout is shorter already; "" when
// ctx has no deadline. The second line behind cancelOnContextEnd: the
// server stops the statement itself should the cancel request not reach it.
// A literal statement without parameters, so it can share a simple-protocol
// round trip with other SET LOCALs.
func LocalStatementTimeout(ctx context.Context) string {
	deadline, ok := ctx.Deadline()
	if !ok {
		return ""
	}
	ms := max((time.Until(deadline)+time.Millisecond-1)/time.Millisecond, 1)
	return fmt.Sprintf(`SELECT pg_catalog.set_config('statement_timeout', '%[1]d', true)
WHERE (SELECT setting::bigint FROM pg_catalog.pg_settings WHERE name = 'statement_timeout') NOT BETWEEN 1 AND %[1]d`, int64(ms))
}

// IsUnavailable reports whether err means the database could not be reached,
// went away or cancelled the statement (its caller's context ended, or
// statement_timeout), as opposed to a statement the server rejected: the
// case where a caller should answer "try again later".
func IsUnavailable(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var netErr net.Error
	if errors.As(err, &netErr) {
		return true
	}
	var connErr *pgconn.ConnectError
	if errors.As(err, &connErr) {
		return true
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		// 08: connection exception; 57P: operator intervention (shutdown);
		// 57014: a statement cancelled (its context ended, so the pool
		// sent a cancel request, or statement_timeout); 53: insufficient
		// resources; 40001/40P01 transient conflicts.
		c := pgErr.Code
		return len(c) >= 2 && (c[:2] == "08" || c[:2] == "53" || (len(c) >= 3 && c[:3] == "57P") ||
			c == "57014" || c == "40001" || c == "40P01")
	}
	return pgconn.SafeToRetry(err)
}

// Ready returns the readiness check of a service that writes (ingress,
// streamer, consumer) for pool: the server answers, takes writes (not a
// standby, not default_transaction_read_only: schema.ErrReadOnly) and the
// schema has every migration this binary expects. A read-only server answers
// the schema check while refusing every write, so a check without the
// read-only test kept such a service in the load balancer.
func Ready(pool *pgxpool.Pool) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		return schema.CheckWritable(ctx, pool)
	}
}

// clientParams are connection-string settings pgx and pgxpool read
// themselves; a server refuses a connection that sends them (42704
// unrecognized configuration parameter).
var clientParams = []string{"statement_cache_capacity", "description_cache_capacity", "default_query_exec_mode"}

// DropClientParams removes from params, the RuntimeParams of a single
// connection parsed with pgconn.ParseConfig or pgx.ParseConfig, the
// settings of a pool's URL that are not the server's: pool_* (pgxpool's,
// such as the pool_max_conns the deployment files set in every service's
// DATABASE_URL) and pgx's own. A LISTEN, replication or command connection
// opened from a service's URL would otherwise be refused.
func DropClientParams(params map[string]string) {
	for k := range params {
		if strings.HasPrefix(k, "pool_") || slices.Contains(clientParams, k) {
			delete(params, k)
		}
	}
}
