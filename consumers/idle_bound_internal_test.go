package consumers

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/internal/database"
	"github.com/inlet-dev/inlet/internal/pgtest"
)

// The idle bound of the SDK's job-row transactions (review helper-221):
// recordTimeout from the completion (idleBounded) or from BEGIN
// (recordTxOptions) to the end of the transaction only, and a stricter
// bound already in force is kept.
func TestIdleBoundOfJobRowTransactions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, err := database.Open(ctx, pgtest.NewDatabase(t), database.Options{MaxConns: 2, AppName: "idle-bound"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	const show = `SELECT current_setting('idle_in_transaction_session_timeout')`
	for _, c := range []struct {
		session, want string // the session's setting before, the transaction's after the bound
	}{
		{"0", "15s"},  // none: bounded
		{"1h", "15s"}, // looser: bounded
		{"2s", "2s"},  // stricter: kept
		{"15s", "15s"},
	} {
		conn, err := pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Exec(ctx, "SET idle_in_transaction_session_timeout = '"+c.session+"'"); err != nil {
			t.Fatal(err)
		}
		// The completion's way: batched with the statement.
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		rows, err := idleBounded{tx}.Query(ctx, show)
		if err != nil {
			t.Fatal(err)
		}
		got, err := pgx.CollectExactlyOneRow(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatalf("session %s: idleBounded: %v", c.session, err)
		}
		if got != c.want {
			t.Errorf("session %s: idle bound after idleBounded = %s, want %s", c.session, got, c.want)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		// record's way: in BEGIN's message.
		tx, err = conn.BeginTx(ctx, recordTxOptions)
		if err != nil {
			t.Fatalf("session %s: begin with recordTxOptions: %v", c.session, err)
		}
		if err := tx.QueryRow(ctx, show).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != c.want {
			t.Errorf("session %s: idle bound in record's transaction = %s, want %s", c.session, got, c.want)
		}
		if err := tx.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
		// SET LOCAL: the session's own setting is back after the transaction.
		if err := conn.QueryRow(ctx, show).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != c.session {
			t.Errorf("session %s: after the transaction the session's setting is %s", c.session, got)
		}
		if _, err := conn.Exec(ctx, "RESET idle_in_transaction_session_timeout"); err != nil {
			t.Fatal(err)
		}
		conn.Release()
	}
}
