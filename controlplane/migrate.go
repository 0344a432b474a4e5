package controlplane

import (
	"cmp"
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inlet-dev/inlet/internal/database"
)

//go:embed migrations/*.up.sql
var migrationFS embed.FS

// migrateLock is the advisory lock key that serialises control plane
// migrations (several replicas may start at once).
const migrateLock = 0x1a7e_c0de

// A migration's DDL (002's ALTER TABLE control_plane.attempts) queues for
// its table's lock behind any transaction that reads the table (pg_dump,
// the nightly backup, holds it for the whole dump), and every later
// statement on the table (each tenant's page, every report) queues behind
// that request. So the migration waits at most migrateLockTimeout for a
// lock, then rolls back (what queued behind it goes on) and tries again
// after migratePause, for up to migrateGiveUp in all.
const (
	migrateLockTimeout = 3 * time.Second
	migratePause       = 5 * time.Second
	migrateGiveUp      = 2 * time.Minute
)

// MigrateConfig configures [MigrateWith].
type MigrateConfig struct {
	// Logger receives each wait for a table another transaction holds, at
	// warn, naming who held it. Defaults to slog.Default().
	Logger *slog.Logger

	// lockTimeout, pause and giveUp are migrateLockTimeout, migratePause
	// and migrateGiveUp unless set (tests shorten them: export_test.go).
	lockTimeout, pause, giveUp time.Duration
}

// Migrate is [MigrateWith] with the default configuration.
func Migrate(ctx context.Context, pool *pgxpool.Pool) ([]int, error) {
	return MigrateWith(ctx, pool, MigrateConfig{})
}

// MigrateWith creates or updates schema control_plane and returns the
// versions it applied now, all in one transaction under an advisory lock
// (replicas starting at once apply each migration once). A statement that
// waits more than 3 s for a lock on a table (lock_timeout: held by a long
// transaction, such as a backup's) rolls the whole transaction back, so the
// page and reports queued behind it are answered, and it is tried again 5 s
// later, each wait logged with who held the tables; after 2 minutes it
// fails, nothing changed, saying to run it again (the process exits and its
// supervisor restarts it).
func MigrateWith(ctx context.Context, pool *pgxpool.Pool, cfg MigrateConfig) ([]int, error) {
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	cfg.lockTimeout = cmp.Or(cfg.lockTimeout, migrateLockTimeout)
	cfg.pause = cmp.Or(cfg.pause, migratePause)
	cfg.giveUp = cmp.Or(cfg.giveUp, migrateGiveUp)
	files, err := fs.Glob(migrationFS, "migrations/*.up.sql")
	if err != nil {
		return nil, err
	}
	sort.Strings(files)
	start := time.Now()
	for try := 1; ; try++ {
		applied, err := migrateOnce(ctx, pool, files, cfg.lockTimeout)
		if pgErr := (*pgconn.PgError)(nil); !errors.As(err, &pgErr) || pgErr.Code != "55P03" /* lock_not_available */ {
			return applied, err
		}
		held := lockHolders(ctx, pool)
		waited := time.Since(start)
		if waited+cfg.pause > cfg.giveUp {
			return nil, fmt.Errorf("migrate control plane: its tables were in use by another transaction%s (a backup?) through %d tries over %s, "+
				"each waiting %s for its lock; nothing changed: run it again once that transaction ends: %w",
				held, try, waited.Round(time.Second), cfg.lockTimeout, err)
		}
		cfg.Logger.Warn("control plane migration: a table it changes is in use by another transaction (a backup?); "+
			"rolled back, so the page and reports are answered meanwhile, and tried again after the wait",
			slog.Int("try", try), slog.Duration("lock_timeout", cfg.lockTimeout), slog.Duration("wait", cfg.pause),
			slog.String("held_by", strings.TrimPrefix(held, ", held by ")), slog.String("error", err.Error()))
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("migrate control plane: waiting for its tables: %w", ctx.Err())
		case <-time.After(cfg.pause):
		}
	}
}

// migrateOnce applies the migrations of files not yet applied, in one
// transaction, each statement waiting at most lockTimeout for a lock after
// the advisory lock (for which a replica waits as long as another one
// migrates).
func migrateOnce(ctx context.Context, pool *pgxpool.Pool, files []string, lockTimeout time.Duration) ([]int, error) {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("migrate control plane: %w", err)
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", migrateLock); err != nil {
		return nil, fmt.Errorf("migrate control plane: lock: %w", err)
	}
	if _, err := tx.Exec(ctx, "SELECT pg_catalog.set_config('lock_timeout', $1, true)",
		strconv.FormatInt(lockTimeout.Milliseconds(), 10)+"ms"); err != nil {
		return nil, fmt.Errorf("migrate control plane: set lock_timeout: %w", err)
	}
	if _, err := tx.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS control_plane;
		CREATE TABLE IF NOT EXISTS control_plane.schema_migrations (
			version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return nil, fmt.Errorf("migrate control plane: %w", err)
	}
	var applied []int
	for _, f := range files {
		base := strings.TrimPrefix(f, "migrations/")
		v, err := strconv.Atoi(base[:strings.IndexByte(base, '_')])
		if err != nil {
			return nil, fmt.Errorf("migration %s: no version number", f)
		}
		var done bool
		if err := tx.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM control_plane.schema_migrations WHERE version = $1)", v).Scan(&done); err != nil {
			return nil, fmt.Errorf("migration %s: read whether applied: %w", base, err)
		}
		if done {
			continue
		}
		sql, err := fs.ReadFile(migrationFS, f)
		if err != nil {
			return nil, err
		}
		if _, err := tx.Exec(ctx, string(sql)); err != nil {
			return nil, fmt.Errorf("migration %s: %w", base, err)
		}
		if _, err := tx.Exec(ctx, "INSERT INTO control_plane.schema_migrations (version) VALUES ($1)", v); err != nil {
			return nil, fmt.Errorf("migration %s: record it: %w", base, err)
		}
		applied = append(applied, v)
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, fmt.Errorf("migrate control plane: commit: %w", err)
	}
	return applied, nil
}

// lockHolders names the sessions holding locks on control_plane's tables:
// ", held by pid 4242 (pg_dump, role backup, idle in transaction, in a
// transaction for 31s, AccessShareLock)". Empty when it cannot tell.
func lockHolders(ctx context.Context, pool *pgxpool.Pool) string {
	rows, err := pool.Query(ctx, query("LockHolders"))
	if err != nil {
		return ""
	}
	defer rows.Close()
	var holders []database.LockHolder
	for rows.Next() {
		var h database.LockHolder
		if err := rows.Scan(&h.PID, &h.Application, &h.Role, &h.State, &h.XactSeconds, &h.Modes); err != nil {
			return ""
		}
		holders = append(holders, h)
	}
	if rows.Err() != nil {
		return ""
	}
	return database.DescribeLockHolders(holders)
}
