package retention_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/retention"
	"github.com/inlet-dev/inlet/schema"
)

// TestIndexBuildSurvivesARetentionDrop (review helper-143, fixed; this
// describes the code before the fix):
//
// inlet migrate, after its migrations, builds the partition indexes a
// migration left pending (schema.BuildIndexes: one CREATE INDEX CONCURRENTLY
// per partition, outside any transaction, on a list of partitions read once
// at the start). It holds no lock that inlet retention respects: a daily
// inlet retention that drops an old period while the builds run (they take
// hours on a large log, and the pending ones are the big, old partitions,
// exactly the ones retention drops) makes the build of that partition fail
// with `relation "webhook_ingress.events_p…" does not exist` (42P01). inlet
// migrate then exits non-zero half done: the remaining partitions keep no
// index (the partitioned index stays invalid) and EnsurePartitions, which
// runs after BuildIndexes in cmd/inlet/migrate.go, does not run at all. An
// init container per replica fails the same way.
//
// Root cause: schema/indexes.go BuildIndexes, the loop over `pending`
// (CREATE INDEX CONCURRENTLY on b.Partition, returned as an error).
//
// Now: a partition that is gone by the time its turn comes is skipped (it
// needs no index; one dropped under its CREATE or ATTACH too), the other
// partitions are built, what is pending is listed again at the end, and
// migrate succeeds with nothing pending.
func TestIndexBuildSurvivesARetentionDrop(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	old := b.event(t, "evt_build_old", 60*day)
	b.finish(t, old, "completed")
	b.seal(t)
	oldPart := partitionOf(t, b, old)

	// What a migration does on a large log: the index made on the parent ON
	// ONLY, its partitions' indexes left to BuildIndexes (012, 024).
	b.exec(t, `CREATE INDEX idx_build_pending ON ONLY webhook_ingress.events (event_type)`)

	conn, err := pgx.Connect(ctx, b.url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)

	var dropped bool
	built, err := schema.BuildIndexes(ctx, conn, func(ib schema.IndexBuild) {
		if ib.Partition != oldPart || dropped {
			return
		}
		// The daily inlet retention runs while the builds go on, and drops
		// the old period just before its turn.
		rep, rerr := retention.Run(ctx, b.pool, retention.Options{MaxAge: 30 * day, Interval: "week", Ahead: 2})
		if rerr != nil {
			t.Errorf("retention during the index builds: %v", rerr)
			return
		}
		for _, p := range rep.Partitions {
			if p.Name == oldPart && p.Verdict == retention.Dropped {
				dropped = true
			}
		}
	}, nil)
	if !dropped {
		t.Fatalf("test set-up: retention did not drop %s during the builds", oldPart)
	}
	if err != nil {
		t.Errorf("inlet migrate's index builds failed because inlet retention dropped %s meanwhile (built %d first): %v", oldPart, len(built), err)
	}
	pending, perr := schema.PendingIndexes(ctx, conn)
	if perr != nil {
		t.Fatal(perr)
	}
	if len(pending) > 0 {
		t.Errorf("after the builds %d partition indexes are still pending (the index stays invalid): %+v", len(pending), pending)
	}
	for _, ib := range built {
		if ib.Partition == oldPart {
			t.Errorf("reported built on %s, which retention dropped before its turn", oldPart)
		}
	}
	if n := b.count(t, `SELECT count(*) FROM pg_index WHERE indexrelid = 'webhook_ingress.idx_build_pending'::regclass AND indisvalid`); n != 1 {
		t.Error("idx_build_pending is still invalid after the builds")
	}
}

// TestIndexBuildValidatesWhenTheLastPendingPartitionIsDropped: when the only
// partition left without the index is dropped under its build (CREATE
// INDEX CONCURRENTLY then fails with undefined_table), no ATTACH completes
// the set, and PostgreSQL marks a partitioned index valid only on an ATTACH:
// BuildIndexes attaches one partition's index again, and the index is valid.
func TestIndexBuildValidatesWhenTheLastPendingPartitionIsDropped(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	old := b.event(t, "evt_build_last", 60*day)
	b.finish(t, old, "completed")
	b.seal(t)
	oldPart := partitionOf(t, b, old)
	// Every partition indexed but the old one (a migration indexes small
	// partitions inline and leaves the large ones).
	b.exec(t, `CREATE INDEX idx_build_last ON ONLY webhook_ingress.events (event_type)`)
	b.exec(t, `DO $$
DECLARE p text;
BEGIN
    FOR p IN SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
             WHERE i.inhparent = 'webhook_ingress.events'::regclass AND c.relname <> '`+oldPart+`'
    LOOP
        EXECUTE format('CREATE INDEX %I ON webhook_ingress.%I (event_type)', p || '_build_last', p);
        EXECUTE format('ALTER INDEX webhook_ingress.idx_build_last ATTACH PARTITION webhook_ingress.%I', p || '_build_last');
    END LOOP;
END $$`)
	conn, err := pgx.Connect(ctx, b.url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if p, err := schema.PendingIndexes(ctx, conn); err != nil || len(p) != 1 || p[0].Partition != oldPart {
		t.Fatalf("test set-up: pending %+v (%v), want idx_build_last on %s alone", p, err, oldPart)
	}

	built, err := schema.BuildIndexes(ctx, conn, func(schema.IndexBuild) {
		// Dropped after BuildIndexes found it there, before its build.
		if _, err := b.pool.Exec(ctx, `SELECT webhook_ingress.drop_partition(period_start) FROM webhook_ingress.partitions()
			WHERE events_partition = $1`, oldPart); err != nil {
			t.Errorf("drop %s: %v", oldPart, err)
		}
	}, nil)
	if err != nil || len(built) != 0 {
		t.Fatalf("BuildIndexes with its one partition dropped under the build: built %+v, %v; want nothing built, no error", built, err)
	}
	if n := b.count(t, `SELECT count(*) FROM pg_index WHERE indexrelid = 'webhook_ingress.idx_build_last'::regclass AND indisvalid`); n != 1 {
		t.Error("idx_build_last is invalid with every partition indexed")
	}
}
