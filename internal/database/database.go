// Package database opens Inlet's PostgreSQL connection pools: one per service,
// each assuming that service's least-privilege role (SET ROLE) on every new
// connection, so a service can do only what its role's grants allow even when
// its login role could do more, and committing durably (synchronous_commit
// at least on, whatever the database's default).
package database

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
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

// IsUnavailable reports whether err means the database could not be reached or
// went away (as opposed to a statement the server rejected), the case where a
// caller should answer "try again later".
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
		// 53: insufficient resources; 40001/40P01 transient conflicts.
		c := pgErr.Code
		return len(c) >= 2 && (c[:2] == "08" || c[:2] == "53" || (len(c) >= 3 && c[:3] == "57P") || c == "40001" || c == "40P01")
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
