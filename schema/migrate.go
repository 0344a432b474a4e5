package schema

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"sort"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Name is the PostgreSQL schema every Inlet object lives in.
const Name = "webhook_ingress"

//go:embed migrations/*.sql
var migrationFS embed.FS

// migrateLockKey serialises concurrent migrators (several replicas starting at
// once). An arbitrary constant: "inlet" in ASCII.
const migrateLockKey int64 = 0x696e6c6574

// Migration is one versioned, embedded SQL file.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

var migrationName = regexp.MustCompile(`^(\d{3})_([a-z0-9_]+)\.up\.sql$`)

// Migrations returns the embedded migrations in version order.
func Migrations() ([]Migration, error) {
	entries, err := fs.ReadDir(migrationFS, "migrations")
	if err != nil {
		return nil, fmt.Errorf("read embedded migrations: %w", err)
	}
	var out []Migration
	for _, e := range entries {
		m := migrationName.FindStringSubmatch(e.Name())
		if m == nil {
			return nil, fmt.Errorf("migration file %q: name must look like 001_name.up.sql", e.Name())
		}
		v, _ := strconv.Atoi(m[1])
		b, err := migrationFS.ReadFile(path.Join("migrations", e.Name()))
		if err != nil {
			return nil, fmt.Errorf("read migration %q: %w", e.Name(), err)
		}
		out = append(out, Migration{Version: v, Name: m[2], SQL: string(b)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	for i, m := range out {
		if m.Version != i+1 {
			return nil, fmt.Errorf("migration %03d_%s: versions must run 1, 2, 3… without gaps", m.Version, m.Name)
		}
	}
	return out, nil
}

// Latest is the newest embedded migration version.
func Latest() int {
	ms, err := Migrations()
	if err != nil || len(ms) == 0 {
		return 0
	}
	return ms[len(ms)-1].Version
}

// Migrate applies every embedded migration not yet recorded in
// webhook_ingress.schema_migrations, each in its own transaction, under an
// advisory lock so concurrent callers apply each migration once. It returns the
// migrations it applied; none when the schema is current (running it twice is a
// no-op). On a schema a newer release migrated it applies nothing and returns
// a *NewerSchemaError.
func Migrate(ctx context.Context, conn *pgx.Conn) ([]Migration, error) {
	return migrateTo(ctx, conn, Latest())
}

// NewerSchemaError is Migrate's error when the database has migrations this
// binary does not know: a newer release migrated it (a host of this version
// rebooting during a rolling upgrade, or a binary rolled back after the new
// one's inlet migrate). Migrate applied nothing and changed nothing: this
// binary's migrations must not write objects of an older version over the
// newer ones. The services of this version run against such a schema (Check
// accepts it), so inlet migrate reports it and succeeds (review helper-240).
type NewerSchemaError struct {
	Version int // the database's newest applied migration
	Latest  int // this binary's newest migration
}

func (e *NewerSchemaError) Error() string {
	return fmt.Sprintf("database schema is at version %d, newer than this binary's %d: nothing applied (a newer inlet migrates it further)",
		e.Version, e.Latest)
}

// migrateTo is Migrate up to version last (tests of a migration's data
// conversion start from the version before it).
func migrateTo(ctx context.Context, conn *pgx.Conn, last int) ([]Migration, error) {
	ms, err := Migrations()
	if err != nil {
		return nil, err
	}
	ms = ms[:min(max(last, 0), len(ms))]
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", migrateLockKey); err != nil {
		return nil, fmt.Errorf("take migration lock: %w", err)
	}
	defer func() {
		// A fresh context: the caller's may be done, and the lock must go.
		_, _ = conn.Exec(context.Background(), "SELECT pg_advisory_unlock($1)", migrateLockKey)
	}()

	// Created only when missing, and checked first: CREATE SCHEMA IF NOT
	// EXISTS needs CREATE on the database even when the schema exists, which
	// an owner whose schema a DBA made (or whose CREATE was taken back after
	// the first run) does not have.
	if _, err := conn.Exec(ctx, `
DO $$
BEGIN
    IF to_regnamespace('webhook_ingress') IS NULL THEN
        CREATE SCHEMA webhook_ingress;
    END IF;
    IF to_regclass('webhook_ingress.schema_migrations') IS NULL THEN
        CREATE TABLE webhook_ingress.schema_migrations (
            version    integer     PRIMARY KEY,
            name       text        NOT NULL,
            applied_at timestamptz NOT NULL DEFAULT now()
        );
    END IF;
END
$$;`); err != nil {
		return nil, fmt.Errorf("create schema_migrations: %w", err)
	}

	current, err := appliedVersion(ctx, conn)
	if err != nil {
		return nil, err
	}
	if current >= len(ms) && last < Latest() {
		return nil, nil
	}
	if current > len(ms) {
		return nil, &NewerSchemaError{Version: current, Latest: len(ms)}
	}
	var applied []Migration
	for _, m := range ms[current:] {
		if err := apply(ctx, conn, m); err != nil {
			return applied, fmt.Errorf("apply migration %03d_%s: %w", m.Version, m.Name, err)
		}
		applied = append(applied, m)
	}
	return applied, nil
}

// deadlockRetries is how many times a migration PostgreSQL picked as a
// deadlock's victim, or one that raced another database's, is tried again.
const deadlockRetries = 5

// retryable reports a migration's failure that a new try can get past: a
// deadlock's victim, or a race with another database of the same cluster
// migrating at the same moment on the cluster-wide roles its migrations
// create and grant (the migration lock is an advisory lock, which holds
// within one database only). Rolled back whole, the next try finds the other
// one's roles and grants and leaves them be.
func retryable(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return false
	}
	switch pgErr.Code {
	case "40P01": // deadlock_detected
		return true
	case "23505": // unique_violation in the shared catalogs: a role, a membership
		return pgErr.ConstraintName == "pg_authid_rolname_index" || pgErr.ConstraintName == "pg_auth_members_role_member_index"
	case "42710": // duplicate_object: CREATE ROLE after the other one committed
		return true
	case "XX000": // a shared catalog row (a role's) changed by the other one meanwhile
		return pgErr.Message == "tuple concurrently updated"
	}
	return false
}

// migrationLockTimeout bounds each migration's wait for a lock (lock_timeout),
// as 012 first did for itself.
const migrationLockTimeout = "10s"

// apply runs m and records it in one transaction. Applied while webhooks
// arrive, a migration's DDL can deadlock with an insert (they lock the same
// tables in different orders), and PostgreSQL may pick the migration as the
// victim: its transaction rolled back whole, so it is run again, after a
// pause that grows with each try (the insert it deadlocked with is done by
// then).
func apply(ctx context.Context, conn *pgx.Conn, m Migration) error {
	for try := 0; ; try++ {
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			// Partition bounds are UTC days, weeks and months, and timestamp
			// arithmetic runs in the session's time zone (the server's
			// default is the host's): a migration that makes partitions
			// (005) must not depend on it.
			if _, err := tx.Exec(ctx, "SET LOCAL TimeZone = 'UTC'; SET LOCAL DateStyle = 'ISO, MDY'"); err != nil {
				return err
			}
			// A migration's DDL queues for its table's lock behind any long
			// reader (pg_dump, an auditor's report), and every insert of
			// ingest queues behind it: the wait is bounded, unless the
			// session sets its own (a migration may set its own too).
			if _, err := tx.Exec(ctx, `SELECT pg_catalog.set_config('lock_timeout', $1, true)
				WHERE pg_catalog.current_setting('lock_timeout') IN ('0', '0ms')`, migrationLockTimeout); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, m.SQL); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, "INSERT INTO webhook_ingress.schema_migrations (version, name) VALUES ($1, $2)", m.Version, m.Name)
			return err
		})
		if err == nil || try == deadlockRetries || !retryable(err) {
			var pgErr *pgconn.PgError
			if errors.As(err, &pgErr) && pgErr.Code == "55P03" {
				return fmt.Errorf("%w: it waited its lock_timeout for a lock on a table it changes, held by a long transaction "+
					"(ingest was not held up longer); nothing changed: run inlet migrate again once that transaction ends", err)
			}
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(time.Duration(try+1) * 100 * time.Millisecond):
		}
	}
}

// Querier is what Check needs: any pgx connection, pool or transaction.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// ErrSchemaNotCurrent means the database lacks migrations this binary expects.
var ErrSchemaNotCurrent = errors.New("database schema is not current")

// ErrReadOnly means the server takes no writes: a hot standby (reached after
// a failover through a DNS name still naming the demoted primary, or a
// multi-host URL without target_session_attrs=read-write) or a database,
// role or server with default_transaction_read_only on (what managed
// services set when the disk fills).
var ErrReadOnly = errors.New("database is read-only")

// Check reports whether the database has every embedded migration applied.
func Check(ctx context.Context, q Querier) error {
	v, _, err := schemaState(ctx, q)
	if err != nil {
		return err
	}
	return checkVersion(v)
}

// CheckWritable is Check for the services that write (ingress, streamer,
// consumer): it also fails with ErrReadOnly when the server takes no writes,
// as every insert, claim and outcome would then fail (SQLSTATE 25006) while
// the schema check alone still passes. One round trip, as Check.
func CheckWritable(ctx context.Context, q Querier) error {
	v, readOnly, err := schemaState(ctx, q)
	if err != nil {
		return err
	}
	if readOnly {
		return fmt.Errorf("%w: transaction_read_only is on (a standby, or default_transaction_read_only set): no write can succeed", ErrReadOnly)
	}
	return checkVersion(v)
}

func checkVersion(v int) error {
	if latest := Latest(); v < latest {
		return fmt.Errorf("%w: at version %d, want %d (run inlet migrate)", ErrSchemaNotCurrent, v, latest)
	}
	return nil
}

// schemaState reads the applied schema version and whether the session's
// transactions are read-only, in one statement. transaction_read_only is on
// for every transaction of a standby and follows default_transaction_read_only
// elsewhere.
func schemaState(ctx context.Context, q Querier) (version int, readOnly bool, err error) {
	err = q.QueryRow(ctx, `SELECT coalesce(max(version), 0), pg_catalog.current_setting('transaction_read_only') = 'on'
FROM webhook_ingress.schema_migrations`).Scan(&version, &readOnly)
	if err != nil {
		return 0, false, fmt.Errorf("read applied schema version: %w", err)
	}
	return version, readOnly, nil
}

func appliedVersion(ctx context.Context, q Querier) (int, error) {
	var v int
	err := q.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM webhook_ingress.schema_migrations`).Scan(&v)
	if err != nil {
		return 0, fmt.Errorf("read applied schema version: %w", err)
	}
	return v, nil
}
