package schema_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/internal/pgtest"
	"github.com/inlet-dev/inlet/schema"
)

// TestBuildIndexesRevalidatesAStuckIndexWithNothingPending (review
// helper-152, fixed; this describes the code before the fix):
//
// BuildIndexes only calls revalidateIndexes when something was
// pending when it started (schema/indexes.go, BuildIndexes: `if err != nil ||
// len(pending) == 0 { return nil, err }` before the lock). The state
// revalidateIndexes exists for — a partitioned index left INVALID although
// every partition has its index attached, because the last partition lacking
// one was dropped (PostgreSQL validates a partitioned index only on an ATTACH
// that completes the set, never on a DETACH/DROP) — is reached just as well
// BETWEEN two runs of inlet migrate as during one: a migration leaves the
// index pending on the large old partitions; inlet migrate builds some and is
// interrupted (the docs: "interrupted, the next inlet migrate finishes it");
// the daily inlet retention drops the old period still lacking it; the next
// inlet migrate finds nothing pending and returns at once. The index stays
// INVALID for good, and every later inlet migrate says nothing about it.
//
// Now: after BuildIndexes (inlet migrate) returns without error, no
// partitioned index of webhook_ingress whose partitions are all indexed is
// left invalid, whether or not anything was pending at the start.
func TestBuildIndexesRevalidatesAStuckIndexWithNothingPending(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.NewEmptyDatabase(t)
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := schema.Migrate(ctx, conn); err != nil {
		t.Fatal(err)
	}
	// Weekly periods from 70 days back: the oldest is past any max_age.
	if _, err := conn.Exec(ctx, `SELECT count(*) FROM webhook_ingress.create_partitions('week', 2, now() - interval '70 days')`); err != nil {
		t.Fatal(err)
	}
	var oldStart, oldPart string
	if err := conn.QueryRow(ctx, `SELECT period_start::text, events_partition FROM webhook_ingress.partitions() ORDER BY period_start LIMIT 1`).Scan(&oldStart, &oldPart); err != nil {
		t.Fatal(err)
	}

	// What a migration leaves on a large log (012, 024): the index on the
	// parent ON ONLY, the partitions' indexes left to BuildIndexes. A first
	// inlet migrate built every one but the old partition's, then was
	// interrupted (pod evicted, Ctrl-C).
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := conn.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	exec(`CREATE INDEX idx_review_stuck ON ONLY webhook_ingress.events (event_type)`)
	exec(`DO $$
DECLARE p text;
BEGIN
    FOR p IN SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
             WHERE i.inhparent = 'webhook_ingress.events'::regclass AND c.relname <> '` + oldPart + `'
    LOOP
        EXECUTE format('CREATE INDEX %I ON webhook_ingress.%I (event_type)', p || '_review_stuck', p);
        EXECUTE format('ALTER INDEX webhook_ingress.idx_review_stuck ATTACH PARTITION webhook_ingress.%I', p || '_review_stuck');
    END LOOP;
END $$`)
	if p, err := schema.PendingIndexes(ctx, conn); err != nil || len(p) != 1 || p[0].Partition != oldPart {
		t.Fatalf("test set-up: pending %+v (%v), want idx_review_stuck on %s alone", p, err, oldPart)
	}

	// Before the next inlet migrate, the daily inlet retention drops the old
	// (empty, expired) period, the one partition still lacking the index.
	exec(`SELECT webhook_ingress.drop_partition($1::timestamptz)`, oldStart)
	if p, err := schema.PendingIndexes(ctx, conn); err != nil || len(p) != 0 {
		t.Fatalf("test set-up: pending %+v (%v) after the drop, want none", p, err)
	}
	var valid bool
	if err := conn.QueryRow(ctx, `SELECT indisvalid FROM pg_index WHERE indexrelid = 'webhook_ingress.idx_review_stuck'::regclass`).Scan(&valid); err != nil || valid {
		t.Fatalf("test set-up: idx_review_stuck valid=%v (%v) after the drop, want still invalid (PostgreSQL does not validate on a drop)", valid, err)
	}

	// The next inlet migrate.
	built, err := schema.BuildIndexes(ctx, conn, nil, nil)
	if err != nil {
		t.Fatalf("BuildIndexes: %v", err)
	}
	if len(built) != 0 {
		t.Errorf("built %+v, want nothing (every partition has its index)", built)
	}
	if err := conn.QueryRow(ctx, `SELECT indisvalid FROM pg_index WHERE indexrelid = 'webhook_ingress.idx_review_stuck'::regclass`).Scan(&valid); err != nil {
		t.Fatal(err)
	}
	if !valid {
		t.Error("idx_review_stuck is still INVALID after inlet migrate's BuildIndexes returned success, with an index attached on every partition: " +
			"it must revalidate when nothing is pending at its start")
	}
}
