package consumers

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/inlet-dev/inlet/internal/database"
	"github.com/inlet-dev/inlet/internal/pgtest"
)

// A conflict returned by a statement of a savepoint begun on the handler's
// tx, through each way of sending one, is one the transaction raised
// (review helper-221); one made elsewhere is not.
func TestWatchedTxNotesConflictsOfItsSavepoints(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, err := database.Open(ctx, pgtest.NewDatabase(t), database.Options{MaxConns: 4, AppName: "watched-tx"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if _, err := pool.Exec(ctx, `CREATE TABLE public.watched (id int PRIMARY KEY, n int NOT NULL); INSERT INTO public.watched VALUES (1, 0)`); err != nil {
		t.Fatal(err)
	}
	const update = `UPDATE public.watched SET n = n + 1 WHERE id = 1 RETURNING n`
	for name, send := range map[string]func(tx pgx.Tx) error{
		"exec": func(tx pgx.Tx) error { _, err := tx.Exec(ctx, update); return err },
		"query": func(tx pgx.Tx) error {
			rows, err := tx.Query(ctx, update)
			if err != nil {
				return err
			}
			_, err = pgx.CollectRows(rows, pgx.RowTo[int])
			return err
		},
		"query row": func(tx pgx.Tx) error { var n int; return tx.QueryRow(ctx, update).Scan(&n) },
		"batch": func(tx pgx.Tx) error {
			b := &pgx.Batch{}
			b.Queue(update)
			return tx.SendBatch(ctx, b).Close()
		},
		"nested savepoint": func(tx pgx.Tx) error {
			return pgx.BeginFunc(ctx, tx, func(tx pgx.Tx) error { _, err := tx.Exec(ctx, update); return err })
		},
	} {
		t.Run(name, func(t *testing.T) {
			tx, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = tx.Rollback(ctx) }()
			raised := &conflicts{}
			htx := handlerTx{watchedTx{Tx: tx, raised: raised}}
			var n int
			if err := htx.QueryRow(ctx, `SELECT n FROM public.watched WHERE id = 1`).Scan(&n); err != nil { // the snapshot
				t.Fatal(err)
			}
			if _, err := pool.Exec(ctx, `UPDATE public.watched SET n = n + 1 WHERE id = 1`); err != nil {
				t.Fatal(err)
			}
			herr := pgx.BeginFunc(ctx, htx, send)
			if !conflict(herr) {
				t.Fatalf("the savepoint's update returned %v, want a serialization failure", herr)
			}
			if st := tx.Conn().PgConn().TxStatus(); st != 'T' {
				t.Fatalf("transaction status %c after the savepoint's rollback, want T", st)
			}
			if !raised.returned(herr) {
				t.Errorf("the conflict returned by the savepoint's statement was not noted as raised in the transaction")
			}
		})
	}
	// A conflict met on another connection is not this transaction's.
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	raised := &conflicts{}
	htx := handlerTx{watchedTx{Tx: tx, raised: raised}}
	if _, err := htx.Exec(ctx, `SELECT 1`); err != nil {
		t.Fatal(err)
	}
	elsewhere := &pgconn.PgError{Code: "40001", Message: "could not serialize access due to concurrent update"}
	if raised.returned(elsewhere) || raised.returned(errors.New("boom")) {
		t.Error("an error not returned by the transaction's statements was taken for one it raised")
	}
}
