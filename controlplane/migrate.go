package controlplane

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
)

//go:embed migrations/*.up.sql
var migrationFS embed.FS

// migrateLock is the advisory lock key that serialises control plane
// migrations (several replicas may start at once).
const migrateLock = 0x1a7e_c0de

// Migrate creates or updates schema control_plane and returns the versions
// it applied now.
func Migrate(ctx context.Context, pool *pgxpool.Pool) ([]int, error) {
	files, err := fs.Glob(migrationFS, "migrations/*.up.sql")
	if err != nil {
		return nil, err
	}
	sort.Strings(files)
	tx, err := pool.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("migrate control plane: %w", err)
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", migrateLock); err != nil {
		return nil, fmt.Errorf("migrate control plane: lock: %w", err)
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
			return nil, err
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
			return nil, err
		}
		applied = append(applied, v)
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, fmt.Errorf("migrate control plane: commit: %w", err)
	}
	return applied, nil
}
