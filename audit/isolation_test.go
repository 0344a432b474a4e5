package audit

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// hookDB runs before(sql) ahead of every QueryRow of the transactions it
// begins: a deterministic place for another session to act between the
// sealer's statements.
type hookDB struct {
	DB
	before func(sql string)
}

func (h hookDB) Begin(ctx context.Context) (pgx.Tx, error) {
	tx, err := h.DB.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return hookTx{Tx: tx, before: h.before}, nil
}

type hookTx struct {
	pgx.Tx
	before func(sql string)
}

func (h hookTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	h.before(sql)
	return h.Tx.QueryRow(ctx, sql, args...)
}

// TestSealUnderRepeatableReadDefaultSealsACommittedIDAsSkipped: the sealer
// runs at READ COMMITTED whatever the database's default isolation, so an
// insert that commits while a pass runs is sealed as the event it is. It
// failed before the fix (sealed 1..3 skipping [2], then a false
// out_of_order_event); it passes since sealOnce and awaitGap begin with SET
// TRANSACTION ISOLATION LEVEL READ COMMITTED (readCommitted).
//
// Defect (review helper-192; this describes the code before the fix):
// on a database (or sealer role) whose default_transaction_isolation
// is repeatable read or serializable (a common DBA setting), the sealer
// seals the id of an insert that commits while a pass runs as "skipped", and
// `inlet audit verify` then reports that untouched event as
// out_of_order_event (a tamper alarm nobody can tell from a real one).
//
// Why: sealOnce (audit/sealer.go, pgx.BeginFunc(ctx, s.cfg.DB, …) with no
// isolation level) relies on READ COMMITTED: the package doc's gap rule
// ("every gap up to that id that the events read after it still shows is an
// insert that rolled back") needs the events read (AuditEventsToSeal) to
// take a snapshot after the probe's pg_locks read. Under the database's
// REPEATABLE READ default the whole pass shares the snapshot of its first
// statement (the advisory try-lock): an insert that was in flight then and
// commits before the probe reads pg_locks is neither in the probe's writers
// nor visible to the events read, so its id is settled and sealed as
// skipped.
//
// Expected: the pass seals id 2 as the event it is (or stops before it),
// whatever the database's default isolation; verify is OK.
func TestSealUnderRepeatableReadDefaultSealsACommittedIDAsSkipped(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, Config{})
	var dbName string
	if err := b.owner.QueryRow(ctx, `SELECT current_database()`).Scan(&dbName); err != nil {
		t.Fatal(err)
	}
	b.owns(t, `ALTER DATABASE `+pgx.Identifier{dbName}.Sanitize()+` SET default_transaction_isolation = 'repeatable read'`)
	sealDB := openAs(t, b.url, "webhook_sealer") // new connections: the database's default applies
	var iso string
	if err := sealDB.QueryRow(ctx, `SHOW default_transaction_isolation`).Scan(&iso); err != nil || iso != "repeatable read" {
		t.Fatalf("sealer's default isolation %q, %v", iso, err)
	}

	b.insert(t, ctx)                  // id 1
	slow := b.inFlight(t, "evt_slow") // id 2, in flight
	b.insert(t, ctx)                  // id 3
	time.Sleep(5 * time.Millisecond)  // past the 1ms grace

	// Id 2's insert commits while the pass runs, just before the probe reads
	// pg_locks: under load, some insert always does.
	var once sync.Once
	db := hookDB{DB: sealDB, before: func(sql string) {
		if strings.Contains(sql, "pg_locks") {
			once.Do(func() {
				if err := slow.Commit(ctx); err != nil {
					t.Errorf("commit id 2: %v", err)
				}
			})
		}
	}}
	s, err := NewSealer(Config{DB: db, Grace: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	cp, err := s.SealOnce(ctx)
	if err != nil {
		t.Fatalf("seal: %v", err)
	}
	t.Logf("sealed %d..%d skipping %v", cp.FirstEventID, cp.LastEventID, cp.SkippedIDs)
	var visible int64
	if err := b.owner.QueryRow(ctx, `SELECT count(*) FROM webhook_ingress.events WHERE id = 2`).Scan(&visible); err != nil || visible != 1 {
		t.Fatalf("event 2 committed: %d rows, %v", visible, err)
	}
	for _, id := range cp.SkippedIDs {
		if id == 2 {
			t.Errorf("the pass sealed id 2 as skipped, but its insert committed and event 2 is in the table")
		}
	}
	if _, err := s.Seal(ctx); err != nil {
		t.Fatal(err)
	}
	if rep := b.verify(t, VerifyOptions{}); !rep.OK {
		for _, p := range rep.Problems {
			t.Logf("false alarm: %s: %s", p.Kind, p.Reason)
		}
		t.Errorf("verify of an untouched log: %d problems, want OK", rep.ProblemsFound)
	}
}
