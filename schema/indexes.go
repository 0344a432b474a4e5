package schema

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// IndexBuild is one partition index BuildIndexes made (or found pending).
type IndexBuild struct {
	Index     string // the partitioned index, e.g. idx_events_payload
	Partition string // the partition it was built on
}

// pendingIndexesSQL lists every partition of a partitioned table that has no
// index attached to one of the table's partitioned indexes: the ones a
// migration left to build CONCURRENTLY (012_occurred_at_payload's payload
// index on partitions over 10,000 rows), or a build interrupted before its
// ATTACH. The index definition is the parent's, retargeted to the partition.
const pendingIndexesSQL = `
SELECT pi.relname::text, pc.relname::text, pg_catalog.pg_get_indexdef(pi.oid)
FROM pg_catalog.pg_index px
JOIN pg_catalog.pg_class pi ON pi.oid = px.indexrelid AND pi.relkind = 'I'
JOIN pg_catalog.pg_class pt ON pt.oid = px.indrelid
JOIN pg_catalog.pg_namespace n ON n.oid = pt.relnamespace AND n.nspname = 'webhook_ingress'
JOIN pg_catalog.pg_inherits ih ON ih.inhparent = pt.oid
JOIN pg_catalog.pg_class pc ON pc.oid = ih.inhrelid
WHERE NOT EXISTS (
    SELECT FROM pg_catalog.pg_inherits ii
    JOIN pg_catalog.pg_index cx ON cx.indexrelid = ii.inhrelid
    WHERE ii.inhparent = pi.oid AND cx.indrelid = pc.oid)
ORDER BY 1, 2`

// PendingIndexes lists the partition indexes still to be built.
func PendingIndexes(ctx context.Context, conn *pgx.Conn) ([]IndexBuild, error) {
	rows, err := conn.Query(ctx, pendingIndexesSQL)
	if err != nil {
		return nil, fmt.Errorf("list pending partition indexes: %w", err)
	}
	var out []IndexBuild
	for rows.Next() {
		var b IndexBuild
		var def string
		if err := rows.Scan(&b.Index, &b.Partition, &def); err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	return out, rows.Err()
}

// BuildIndexes builds, one partition at a time, every partition index a
// migration left pending, with CREATE INDEX CONCURRENTLY so ingest goes on
// writing meanwhile, and attaches each to its partitioned index (which becomes
// valid once every partition has one). report is called before each build.
// A partition dropped meanwhile (by inlet retention) is skipped: it needs no
// index. A partitioned index left invalid because the last partition lacking
// it was dropped (during this run, or since an earlier one was interrupted)
// is made valid, whether or not anything is pending. Run it after Migrate,
// outside any transaction (inlet migrate does); it is idempotent, and a build
// interrupted half-way (an INVALID index left by a cancelled CONCURRENTLY) is
// dropped and made again. Callers on several hosts at once (an inlet migrate
// per replica) take turns: the first builds, the others wait for it and then
// find nothing pending; waiting (nil: nothing) is called once when one starts
// to wait.
func BuildIndexes(ctx context.Context, conn *pgx.Conn, report func(IndexBuild), waiting func()) ([]IndexBuild, error) {
	// A build takes as long as its partition is large, and CONCURRENTLY
	// waits (as lock waits) for every transaction older than it: a
	// statement_timeout or lock_timeout of the role or the database (set for
	// the services) would cancel it on every run behind a long one, leaving
	// an INVALID index dropped and built again each time. Both off for the
	// builds (a CONCURRENTLY build blocks no writer while it waits); the
	// session's own settings are put back after.
	var timeout, lockTimeout string
	if err := conn.QueryRow(ctx, `SELECT current_setting('statement_timeout'), current_setting('lock_timeout')`).Scan(&timeout, &lockTimeout); err != nil {
		return nil, fmt.Errorf("read statement_timeout and lock_timeout: %w", err)
	}
	if _, err := conn.Exec(ctx, `SET statement_timeout = 0; SET lock_timeout = 0`); err != nil {
		return nil, fmt.Errorf("turn statement_timeout and lock_timeout off for the index builds: %w", err)
	}
	defer func() {
		_, _ = conn.Exec(context.WithoutCancel(ctx), `SELECT pg_catalog.set_config('statement_timeout', $1, false), pg_catalog.set_config('lock_timeout', $2, false)`,
			timeout, lockTimeout)
	}()
	pending, err := PendingIndexes(ctx, conn)
	if err != nil {
		return nil, err
	}
	if len(pending) == 0 {
		// Nothing to build, but an index may have been left invalid since
		// the last run: interrupted, that run left a partition unbuilt,
		// which inlet retention then dropped. Revalidated below, under the
		// lock; one catalog query when there is none.
		stuck, err := stuckIndexes(ctx, conn)
		if err != nil || len(stuck) == 0 {
			return nil, err
		}
	}
	unlock, err := lockIndexBuilds(ctx, conn, waiting)
	if err != nil {
		return nil, err
	}
	defer unlock()
	// Another caller may have built them while this one waited.
	if pending, err = PendingIndexes(ctx, conn); err != nil {
		return nil, err
	}
	var built []IndexBuild
	// The list is read once, and a build takes hours on a large partition:
	// inlet retention may drop a listed partition meanwhile (it holds no lock
	// this one waits for, and the pending ones are the large old ones it
	// drops), so one gone by its turn is skipped. What is pending is listed
	// again after the builds, and anything not yet tried is built too.
	tried := map[IndexBuild]bool{}
	for len(pending) > 0 {
		for _, b := range pending {
			tried[b] = true
			ok, err := buildIndex(ctx, conn, b, report)
			if err != nil {
				return built, err
			}
			if ok {
				built = append(built, b)
			}
		}
		all, err := PendingIndexes(ctx, conn)
		if err != nil {
			return built, err
		}
		pending = pending[:0]
		for _, b := range all {
			if !tried[b] {
				pending = append(pending, b)
			}
		}
	}
	if err := revalidateIndexes(ctx, conn); err != nil {
		return built, err
	}
	return built, nil
}

// buildIndex builds b.Index on b.Partition and attaches it, or reports false
// when the partition is gone (dropped by inlet retention since it was
// listed): before its turn, or under the CREATE or the ATTACH.
func buildIndex(ctx context.Context, conn *pgx.Conn, b IndexBuild, report func(IndexBuild)) (bool, error) {
	if gone, err := partitionGone(ctx, conn, b.Partition); err != nil || gone {
		return false, err
	}
	if report != nil {
		report(b)
	}
	var def string
	if err := conn.QueryRow(ctx, `SELECT pg_catalog.pg_get_indexdef(('webhook_ingress.' || quote_ident($1))::regclass)`, b.Index).Scan(&def); err != nil {
		return false, fmt.Errorf("read definition of %s: %w", b.Index, err)
	}
	child := b.Partition + "_" + trimIdxPrefix(b.Index)
	method, err := indexTail(def)
	if err != nil {
		return false, fmt.Errorf("index %s: %w", b.Index, err)
	}
	stmts := []string{
		fmt.Sprintf(`DROP INDEX CONCURRENTLY IF EXISTS webhook_ingress.%s`, pgx.Identifier{child}.Sanitize()),
		fmt.Sprintf(`CREATE INDEX CONCURRENTLY %s ON webhook_ingress.%s %s`,
			pgx.Identifier{child}.Sanitize(), pgx.Identifier{b.Partition}.Sanitize(), method),
		fmt.Sprintf(`ALTER INDEX webhook_ingress.%s ATTACH PARTITION webhook_ingress.%s`,
			pgx.Identifier{b.Index}.Sanitize(), pgx.Identifier{child}.Sanitize()),
	}
	for _, s := range stmts {
		if _, err := conn.Exec(ctx, s); err != nil {
			// undefined_table: the partition (with the index just built on
			// it) dropped between the check and this statement. Any other
			// undefined_table (the partitioned index gone) is an error.
			if isUndefinedTable(err) {
				if gone, gerr := partitionGone(ctx, conn, b.Partition); gerr == nil && gone {
					return false, nil
				}
			}
			return false, fmt.Errorf("build %s on partition %s: %w", b.Index, b.Partition, err)
		}
	}
	return true, nil
}

// partitionGone reports whether webhook_ingress has no table named partition.
func partitionGone(ctx context.Context, conn *pgx.Conn, partition string) (bool, error) {
	var gone bool
	if err := conn.QueryRow(ctx, `SELECT pg_catalog.to_regclass('webhook_ingress.' || quote_ident($1)) IS NULL`, partition).Scan(&gone); err != nil {
		return false, fmt.Errorf("look up partition %s: %w", partition, err)
	}
	return gone, nil
}

// stuckIndexesSQL lists the partitioned indexes left invalid with an index
// attached on every partition, and one of those: what a partition dropped
// after the last ATTACH leaves (PostgreSQL marks a partitioned index valid
// only when an ATTACH completes the set, and the drop of the last partition
// lacking one does not).
const stuckIndexesSQL = `
SELECT pi.relname::text, ci.relname::text
FROM pg_catalog.pg_index px
JOIN pg_catalog.pg_class pi ON pi.oid = px.indexrelid AND pi.relkind = 'I'
JOIN pg_catalog.pg_namespace n ON n.oid = pi.relnamespace AND n.nspname = 'webhook_ingress'
JOIN LATERAL (
    SELECT c.relname FROM pg_catalog.pg_inherits ii JOIN pg_catalog.pg_class c ON c.oid = ii.inhrelid
    WHERE ii.inhparent = pi.oid ORDER BY c.relname LIMIT 1) ci ON true
WHERE NOT px.indisvalid
  AND NOT EXISTS (
    SELECT FROM pg_catalog.pg_inherits ih
    WHERE ih.inhparent = px.indrelid
      AND NOT EXISTS (
        SELECT FROM pg_catalog.pg_inherits ii
        JOIN pg_catalog.pg_index cx ON cx.indexrelid = ii.inhrelid
        WHERE ii.inhparent = pi.oid AND cx.indrelid = ih.inhrelid))
ORDER BY 1`

// stuckIndex is a partitioned index stuckIndexesSQL lists, and the
// partition index of it to attach again.
type stuckIndex struct{ index, child string }

// stuckIndexes lists the partitioned indexes of stuckIndexesSQL.
func stuckIndexes(ctx context.Context, conn *pgx.Conn) ([]stuckIndex, error) {
	rows, err := conn.Query(ctx, stuckIndexesSQL)
	if err != nil {
		return nil, fmt.Errorf("list partitioned indexes left invalid: %w", err)
	}
	var all []stuckIndex
	for rows.Next() {
		var s stuckIndex
		if err := rows.Scan(&s.index, &s.child); err != nil {
			return nil, err
		}
		all = append(all, s)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list partitioned indexes left invalid: %w", err)
	}
	return all, nil
}

// revalidateIndexes attaches again one partition index of each partitioned
// index stuckIndexesSQL lists, which has PostgreSQL count them again and
// mark the index valid (15 does so for an index already attached; a release
// that does not leaves it as it was). Under the index build lock: a build
// beside it would take the same locks.
func revalidateIndexes(ctx context.Context, conn *pgx.Conn) error {
	all, err := stuckIndexes(ctx, conn)
	if err != nil {
		return err
	}
	for _, s := range all {
		if _, err := conn.Exec(ctx, fmt.Sprintf(`ALTER INDEX webhook_ingress.%s ATTACH PARTITION webhook_ingress.%s`,
			pgx.Identifier{s.index}.Sanitize(), pgx.Identifier{s.child}.Sanitize())); err != nil && !isUndefinedTable(err) {
			return fmt.Errorf("validate %s (an index on every partition): %w", s.index, err)
		}
	}
	return nil
}

// isUndefinedTable reports PostgreSQL's undefined_table.
func isUndefinedTable(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "42P01"
}

// indexBuildLockKey serialises BuildIndexes across sessions: "inletidx" in
// ASCII. Not Migrate's key, which a migrator holds only while it migrates.
const indexBuildLockKey int64 = 0x696e6c6574696478

// indexBuildPoll is how often a waiting BuildIndexes asks for the lock again.
const indexBuildPoll = 200 * time.Millisecond

// lockIndexBuilds takes the session lock of BuildIndexes, asking again every
// indexBuildPoll until ctx is done. It does not wait inside PostgreSQL: a
// session blocked in pg_advisory_lock holds a snapshot, which the holder's
// CREATE INDEX CONCURRENTLY would wait for in turn (a deadlock).
func lockIndexBuilds(ctx context.Context, conn *pgx.Conn, waiting func()) (unlock func(), err error) {
	for try := 0; ; try++ {
		var got bool
		if err := conn.QueryRow(ctx, `SELECT pg_catalog.pg_try_advisory_lock($1)`, indexBuildLockKey).Scan(&got); err != nil {
			return nil, fmt.Errorf("take the index build lock: %w", err)
		}
		if got {
			return func() {
				// A fresh context: the caller's may be done, and the lock must go.
				_, _ = conn.Exec(context.Background(), `SELECT pg_catalog.pg_advisory_unlock($1)`, indexBuildLockKey)
			}, nil
		}
		if try == 0 && waiting != nil {
			waiting()
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("wait for another session building partition indexes: %w", ctx.Err())
		case <-time.After(indexBuildPoll):
		}
	}
}

func trimIdxPrefix(name string) string {
	if len(name) > 4 && name[:4] == "idx_" {
		name = name[4:]
	}
	return name
}

// indexTail returns what follows "ON ONLY table" / "ON table" in an index
// definition: "USING gin (payload jsonb_path_ops)".
func indexTail(def string) (string, error) {
	const using = " USING "
	for i := 0; i+len(using) <= len(def); i++ {
		if def[i:i+len(using)] == using {
			return def[i+1:], nil
		}
	}
	return "", fmt.Errorf("unexpected definition %q", def)
}
