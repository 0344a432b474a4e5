// Package pgtest is the test harness's PostgreSQL: one throwaway cluster per
// test binary, started from the machine's PostgreSQL binaries (installed with
// apt-get when absent and root), and a fresh migrated database per test, cloned
// from a template so each test starts in a few milliseconds. The cluster's
// data directory, template included, is copied from a cache the first binary
// fills (see cache.go).
//
// Use it from TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }
//
// Set INLET_TEST_DATABASE_URL to a superuser URL of an existing server to use
// it instead of starting a cluster; a URL that does not answer fails the run
// with one clear message.
package pgtest

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inlet-dev/inlet/internal/pgcluster"
	"github.com/inlet-dev/inlet/schema"
)

const templateDB = "inlet_template"

var (
	// createSuffix ends CREATE DATABASE … TEMPLATE: on our own cluster (fsync
	// off) FILE_COPY takes ~40ms where the default WAL_LOG, which writes the
	// whole template to the WAL, took ~650ms on this machine, per test.
	createSuffix string
	once         sync.Once
	onceErr      error
	cluster      *pgcluster.Cluster
	clusterDir   string
	adminURL     func(db string) string
	dbCounter    atomic.Int64
	// admin is the harness's own pool on the postgres database, for CREATE
	// and DROP DATABASE: a new connection costs ~25 ms of CPU on the 2-core
	// development machine (fork, catalog reads, exit), and each test opened
	// two of them.
	admin *pgxpool.Pool
)

// Main runs the tests and stops the cluster afterwards.
func Main(m *testing.M) int {
	code := m.Run()
	if admin != nil {
		admin.Close()
	}
	if cluster != nil {
		_ = cluster.Stop()
	}
	if clusterDir != "" {
		_ = os.RemoveAll(clusterDir)
	}
	return code
}

func setup() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if u := os.Getenv("INLET_TEST_DATABASE_URL"); u != "" {
		base, err := url.Parse(u)
		if err != nil || base.Scheme == "" {
			return fmt.Errorf("INLET_TEST_DATABASE_URL must be a postgres:// URL: %v", err)
		}
		adminURL = func(db string) string {
			c := *base
			c.Path = "/" + db
			return c.String()
		}
		conn, err := pgx.Connect(ctx, u)
		if err != nil {
			return fmt.Errorf("INLET_TEST_DATABASE_URL is set but does not answer: %w", err)
		}
		conn.Close(ctx)
	} else {
		dir, err := os.MkdirTemp("", "inlet-pgtest-")
		if err != nil {
			return err
		}
		clusterDir = dir
		// The server runs as the postgres user, which must reach its directory.
		if err := os.Chmod(dir, 0o755); err != nil {
			return err
		}
		entry, err := cacheDir(ctx)
		if err != nil {
			return err
		}
		// New runs initdb unless the data directory is there already.
		dataDir := filepath.Join(dir, "cluster", "data")
		if err := os.MkdirAll(filepath.Dir(dataDir), 0o755); err != nil {
			return err
		}
		cached := restoreCache(entry, dataDir)
		c, err := pgcluster.New(ctx, pgcluster.Config{
			Dir:     filepath.Join(dir, "cluster"),
			Install: true,
			// A throwaway cluster: durability across an OS crash is not needed, speed is.
			// wal_level=logical: the replication wake source is tested too.
			// jit=off: a statement a test runs on stale statistics can cross
			// jit_above_cost, and the backend then loads LLVM (relocating
			// libLLVM, ~1 % of the whole suite's CPU, and as much again in
			// its exit handlers); the protocol's functions set jit=off
			// themselves, so nothing a test checks depends on it.
			Settings: map[string]string{"fsync": "off", "full_page_writes": "off", "jit": "off", "max_connections": "300",
				"wal_level": "logical", "max_replication_slots": "20", "max_wal_senders": "20"},
		})
		if err != nil {
			return err
		}
		if err := c.Start(ctx); err != nil {
			return err
		}
		cluster = c
		adminURL = c.URL
		if v, err := serverVersion(ctx); err != nil {
			return err
		} else if v >= 150000 { // STRATEGY is new in PostgreSQL 15
			createSuffix = " STRATEGY FILE_COPY"
		}
		if cached {
			return migrateTemplate(ctx) // a no-op, unless the cache is stale
		}
		if err := createTemplate(ctx); err != nil {
			return err
		}
		// Stopped for a consistent copy; a failure to save costs the next
		// binary the same setup again, nothing more.
		if err := c.Stop(); err != nil {
			return err
		}
		_ = saveCache(entry, dataDir)
		return c.Start(ctx)
	}
	return createTemplate(ctx)
}

func serverVersion(ctx context.Context) (int, error) {
	conn, err := pgx.Connect(ctx, adminURL("postgres"))
	if err != nil {
		return 0, err
	}
	defer conn.Close(ctx)
	var v int
	if err := conn.QueryRow(ctx, "SELECT current_setting('server_version_num')::int").Scan(&v); err != nil {
		return 0, fmt.Errorf("read server version: %w", err)
	}
	return v, nil
}

func createTemplate(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, adminURL("postgres"))
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+templateDB+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("drop old template: %w", err)
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+templateDB); err != nil {
		return fmt.Errorf("create template database: %w", err)
	}
	return migrateTemplate(ctx)
}

func migrateTemplate(ctx context.Context) error {
	tconn, err := pgx.Connect(ctx, adminURL(templateDB))
	if err != nil {
		return err
	}
	defer tconn.Close(ctx)
	if _, err := schema.Migrate(ctx, tconn); err != nil {
		return fmt.Errorf("migrate template database: %w", err)
	}
	return nil
}

func ensure(t testing.TB) {
	t.Helper()
	once.Do(func() {
		if onceErr = setup(); onceErr == nil {
			admin, onceErr = newAdminPool()
		}
	})
	if onceErr != nil {
		t.Fatalf("test PostgreSQL is not available: %v", onceErr)
	}
}

// Cluster returns the harness's cluster, nil when INLET_TEST_DATABASE_URL is used.
func Cluster(t testing.TB) *pgcluster.Cluster {
	ensure(t)
	return cluster
}

// NewDatabase creates a fresh, migrated database for this test and returns its
// superuser URL. It is dropped when the test ends.
func NewDatabase(t testing.TB) string {
	t.Helper()
	return newDatabase(t, templateDB)
}

// newAdminPool opens (lazily) the pool newDatabase creates and drops
// databases through.
func newAdminPool() (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(adminURL("postgres"))
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = 4
	cfg.ConnConfig.RuntimeParams["application_name"] = "pgtest-admin"
	return pgxpool.NewWithConfig(context.Background(), cfg)
}

func newDatabase(t testing.TB, template string) string {
	t.Helper()
	ensure(t)
	name := fmt.Sprintf("inlet_test_%d_%d", os.Getpid(), dbCounter.Add(1))
	ctx := context.Background()
	// CREATE DATABASE … TEMPLATE needs the template free of sessions; retry
	// briefly when a parallel test is cloning it at the same moment.
	var err error
	for i := 0; ; i++ {
		_, err = admin.Exec(ctx, "CREATE DATABASE "+name+" TEMPLATE "+template+createSuffix)
		if err == nil || i == 50 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("create test database %s: %v", name, err)
	}
	t.Cleanup(func() {
		_, _ = admin.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
	})
	return adminURL(name)
}

// NewEmptyDatabase creates a database with no Inlet schema (for migration
// tests) and returns its superuser URL. It is dropped when the test ends.
func NewEmptyDatabase(t testing.TB) string {
	t.Helper()
	return newDatabase(t, "template0")
}

// NewPool is NewDatabase plus a superuser pool on it, closed when the test ends.
func NewPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	url := NewDatabase(t)
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatalf("open pool on test database: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// TempDir is a temporary directory the PostgreSQL server user can enter, for
// a test's own cluster (t.TempDir's parents are private to the test's user).
// It is removed when the test ends.
func TempDir(t testing.TB) string {
	t.Helper()
	d, err := os.MkdirTemp("", "inlet-test-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(d, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}
