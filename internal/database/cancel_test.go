package database_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/inlet-dev/inlet/internal/database"
	"github.com/inlet-dev/inlet/internal/pgtest"
)

// A statement whose context ends is cancelled in PostgreSQL too (a cancel
// request, review helper-295), not only cut off on the client's side: its
// backend is idle again when the call returns, the error is 57014 (which
// IsUnavailable reports) and the connection stays usable.
func TestContextEndCancelsTheStatementServerSide(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t)
	ctx := context.Background()
	pool, err := database.Open(ctx, url, database.Options{MaxConns: 1, AppName: "cancel-test"})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	watch, err := database.Open(ctx, url, database.Options{MaxConns: 1, AppName: "cancel-test-watch"})
	if err != nil {
		t.Fatal(err)
	}
	defer watch.Close()

	qctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = pool.Exec(qctx, `SELECT pg_sleep(30) /* cancel-test */`)
	took := time.Since(start)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "57014" {
		t.Fatalf("pg_sleep(30) past its 300ms context: %v (after %v), want the server's 57014 query_canceled", err, took)
	}
	if !database.IsUnavailable(err) {
		t.Errorf("IsUnavailable(%v) = false: a cancelled statement is one to try again later", err)
	}
	if took > 5*time.Second {
		t.Errorf("the cancelled statement returned after %v", took)
	}
	var running int
	if err := watch.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
		WHERE state = 'active' AND query LIKE '%pg_sleep(30) /* cancel-test */%' AND pid <> pg_backend_pid()`).Scan(&running); err != nil {
		t.Fatal(err)
	}
	if running != 0 {
		t.Errorf("%d backends still run the statement whose context ended", running)
	}
	var one int
	if err := pool.QueryRow(ctx, `SELECT 1`).Scan(&one); err != nil || one != 1 {
		t.Errorf("the pool after a cancelled statement: %d, %v", one, err)
	}
}

// LocalStatementTimeout bounds the transaction's statements by the time its
// context has left, never above a shorter statement_timeout of the session,
// and is nothing without a deadline.
func TestLocalStatementTimeout(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	if s := database.LocalStatementTimeout(ctx); s != "" {
		t.Fatalf("no deadline: %q, want none", s)
	}
	pool, err := database.Open(ctx, pgtest.NewDatabase(t), database.Options{MaxConns: 1, AppName: "timeout-test"})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	timeoutIn := func(session string, left time.Duration) time.Duration {
		t.Helper()
		tctx, cancel := context.WithTimeout(ctx, left)
		defer cancel()
		var ms int64
		err := pgx.BeginFunc(tctx, pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(tctx, "SET LOCAL statement_timeout = '"+session+"'"); err != nil {
				return err
			}
			if _, err := tx.Exec(tctx, database.LocalStatementTimeout(tctx)); err != nil {
				return err
			}
			return tx.QueryRow(tctx, `SELECT setting::bigint FROM pg_settings WHERE name = 'statement_timeout'`).Scan(&ms)
		})
		if err != nil {
			t.Fatal(err)
		}
		return time.Duration(ms) * time.Millisecond
	}
	for _, c := range []struct {
		session     string
		left        time.Duration
		least, most time.Duration
		what        string
	}{
		{"0", time.Minute, 50 * time.Second, time.Minute, "no statement_timeout: the time left"},
		{"2h", 10 * time.Second, 5 * time.Second, 10 * time.Second, "a longer statement_timeout: the time left"},
		{"2s", time.Minute, 2 * time.Second, 2 * time.Second, "a shorter statement_timeout: kept"},
	} {
		if got := timeoutIn(c.session, c.left); got < c.least || got > c.most {
			t.Errorf("statement_timeout %s, %v left: %v, want %v to %v (%s)", c.session, c.left, got, c.least, c.most, c.what)
		}
	}
}

// A connection a cancel request was sent on is closed, never handed to the
// next caller: a cancel that reaches the server late (after 100 ms through a
// pooler or proxy) would cancel that caller's statement instead (review
// helper-304; ingress/review304_test.go shows the harm through a delaying
// hop). Its backend is gone and the next statement runs on another; a
// connection whose statements ended in time stays in the pool.
func TestConnectionACancelWasSentOnIsNotReused(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t)
	ctx := context.Background()
	pool, err := database.Open(ctx, url, database.Options{MaxConns: 1, AppName: "cancel-reuse-test"})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	pid := func() uint32 {
		t.Helper()
		var p uint32
		if err := pool.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	first := pid()
	if again := pid(); again != first {
		t.Fatalf("two statements in time ran on backends %d and %d: the pool of one dropped a healthy connection", first, again)
	}
	qctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	_, err = pool.Exec(qctx, `SELECT pg_sleep(30)`)
	cancel()
	if err == nil {
		t.Fatal("pg_sleep(30) past its 200ms context succeeded")
	}
	if next := pid(); next == first {
		t.Errorf("the statement after a cancel ran on backend %d, the one the cancel request was sent to: a late cancel would cancel it", next)
	}
}
