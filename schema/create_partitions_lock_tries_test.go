package schema_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/inlet-dev/inlet/internal/pgtest"
	"github.com/inlet-dev/inlet/schema"
)

// create_partitions takes its locks in short tries since 069 (see
// retention's TestCreatingPartitionsAheadDoesNotStallIngest for what that
// spares ingest). What its callers rely on besides stays as it was: the
// migration runs twice and changes nothing (the function keeps its owner,
// grants and 039's UTC settings), the caller's lock_timeout is given back
// after the tries (they lower it to 100 ms inside), and a caller's
// lock_timeout shorter than a try bounds the whole wait, then
// lock_not_available (55P03) as before.
func TestCreatePartitionsLockTriesKeepTheContract(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	connect := func() *pgx.Conn {
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close(context.Background()) })
		return conn
	}
	admin, reader := connect(), connect()

	describe := func() (s string) {
		t.Helper()
		if err := admin.QueryRow(ctx, `SELECT pg_get_userbyid(proowner) || ' ' || coalesce(proacl::text, '') || ' ' || array_to_string(proconfig, ';')
			FROM pg_proc WHERE oid = 'webhook_ingress.create_partitions(text, integer, timestamptz)'::regprocedure`).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	before := describe()
	ms, err := schema.Migrations()
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(ms, func(m schema.Migration) bool { return m.Version == 69 })
	if i < 0 {
		t.Fatal("migration 069 is not embedded")
	}
	m := ms[i]
	if _, err := admin.Exec(ctx, m.SQL); err != nil {
		t.Fatalf("migration %03d_%s run again: %v", m.Version, m.Name, err)
	}
	if after := describe(); after != before {
		t.Errorf("create_partitions after migration 069 ran again: %q; before: %q", after, before)
	}
	if want := "TimeZone=UTC"; !strings.Contains(before, want) {
		t.Errorf("create_partitions settings %q: want %s (039)", before, want)
	}

	// The caller's lock_timeout, after a creation.
	err = pgx.BeginFunc(ctx, admin, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SET LOCAL lock_timeout = '3s'`); err != nil {
			return err
		}
		var n int
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM webhook_ingress.create_partitions('week', 8)`).Scan(&n); err != nil {
			return err
		}
		var lt string
		if err := tx.QueryRow(ctx, `SHOW lock_timeout`).Scan(&lt); err != nil {
			return err
		}
		if n == 0 || lt != "3s" {
			t.Errorf("create_partitions('week', 8): created %d (want some), lock_timeout after it %q (want the caller's 3s)", n, lt)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	// A caller's lock_timeout shorter than a try, while a reader holds events.
	rtx, err := reader.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer rtx.Rollback(ctx)
	if _, err := rtx.Exec(ctx, `SELECT count(*) FROM webhook_ingress.events`); err != nil {
		t.Fatal(err)
	}
	s := time.Now()
	err = pgx.BeginFunc(ctx, admin, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SET LOCAL lock_timeout = '30ms'`); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `SELECT count(*) FROM webhook_ingress.create_partitions('week', 10)`)
		return err
	})
	waited := time.Since(s)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "55P03" {
		t.Fatalf("create_partitions with lock_timeout 30ms while a reader holds events: %v; want lock_not_available (55P03)", err)
	}
	// 30 ms asked; the rest is the machine (2 shared cores, -race).
	if waited > time.Second {
		t.Errorf("create_partitions with lock_timeout 30ms gave up after %s", waited)
	}
}
