package admin_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/admin"
)

// observedDB308 is the operator pool, its transactions reading, just before
// they commit, the statement_timeout they ran under.
type observedDB308 struct {
	db   admin.DB
	seen []time.Duration
}

func (o *observedDB308) BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error) {
	tx, err := o.db.BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	return &observedTx308{Tx: tx, o: o}, nil
}

type observedTx308 struct {
	pgx.Tx
	o *observedDB308
}

func (t *observedTx308) Commit(ctx context.Context) error {
	var ms int64
	if err := t.Tx.QueryRow(ctx, `SELECT setting::bigint FROM pg_catalog.pg_settings WHERE name = 'statement_timeout'`).Scan(&ms); err != nil {
		return err
	}
	t.o.seen = append(t.o.seen, time.Duration(ms)*time.Millisecond)
	return t.Tx.Commit(ctx)
}

// TestSurvivor308_TransactionsRunUnderTheRequestsStatementTimeout
// (mutation run, helper-308).
// Guarantee (5d25b05): every transaction of the admin package (readTx,
// writeTx) bounds its statements by the time its context has left (SET
// LOCAL statement_timeout, database.LocalStatementTimeout), so PostgreSQL
// stops a timed-out request's statement itself should the pool's cancel
// request not reach it (review helper-295: the second line behind
// cancelOnContextEnd).
// Mutant that no existing test caught (admin/admin.go:140, setLocals):
// "timeout != """ made "timeout != "" && false", so no statement_timeout
// is set and a request's statement runs to its end whenever the cancel
// request is lost.
// Why missed: TestRequestTimeoutCancelsItsStatement passes on the cancel
// request alone (cancelOnContextEnd), which reaches the server in the
// test; TestLocalStatementTimeout (internal/database) tests the statement,
// not that admin runs it.
// Here a read (GetEvent's readTx) and a write (FoldEventTypes's writeTx)
// run under a 40 s deadline, and each transaction reads its own
// statement_timeout before committing.
func TestSurvivor308_TransactionsRunUnderTheRequestsStatementTimeout(t *testing.T) {
	b := setup(t)
	o := &observedDB308{db: b.op}
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	if _, err := admin.ListEvents(ctx, o, admin.EventFilter{}); err != nil {
		t.Fatalf("ListEvents: %v", err)
	}
	if err := admin.FoldEventTypes(ctx, o, 100); err != nil {
		t.Fatalf("FoldEventTypes: %v", err)
	}
	if len(o.seen) != 2 {
		t.Fatalf("%d transactions committed, want 2 (a read and a write)", len(o.seen))
	}
	for i, d := range o.seen {
		if d <= 0 || d > 40*time.Second {
			t.Errorf("%s transaction ran under statement_timeout %v; want the request's time left (0 < it <= 40s): "+
				"a statement whose cancel request is lost runs to its end", []string{"read", "write"}[i], d)
		}
	}
}
