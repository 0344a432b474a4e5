package schema_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/internal/testwait"
	"github.com/inlet-dev/inlet/schema"
)

// TestMigrationLockWaitDoesNotStallIngest: a migration waits at most its
// lock_timeout (10 s) behind a long reader of the log, ingest goes on after
// that, and the migration fails saying to run inlet migrate again, having
// changed nothing.
//
// Regression test (review helper-109; fixed: the text describes the
// behaviour before the fix). Several migrations on the upgrade path take an ACCESS EXCLUSIVE
// lock on events or jobs with no lock_timeout (schema.apply sets none, and
// only 012, 015, 024 and 026 set their own):
//
//	007 ALTER TABLE events/jobs ADD COLUMN trace_parent
//	010 ALTER TABLE jobs ADD COLUMN completed_attempt_id, DROP INDEX idx_jobs_leased
//	011 ALTER TABLE jobs/events ENABLE ROW LEVEL SECURITY
//	019 ALTER TABLE jobs ADD COLUMN order_key, order_at (then CREATE INDEX on every jobs partition, inline)
//	020 DROP INDEX jobs_order_lane
//
// Behind any long reader of the log (pg_dump, an auditor's report, inlet
// events list over a large range), such a migration queues for its lock for
// as long as that reader runs, and every ingest transaction (an INSERT into
// events, whose fan-out inserts into jobs) queues behind the migration: ingest
// stops for the reader's whole duration, every request ends in 503 "outcome
// unknown". docs/database.md ("Upgrading to 012") and 012's own header say
// why a migration on a live log must bound that wait ("lock_timeout bounds
// how long this transaction waits for its ACCESS EXCLUSIVE lock behind a long
// query (ingest waits behind that wait); when it expires, nothing changed:
// run inlet migrate again"); the migrations above do not.
//
// Expected: the migration gives up after its lock_timeout (10 s as in 012),
// nothing changed, and ingest goes on; the insert below completes within
// that bound. Here it is still blocked 20 s later (until the reader ends).
func TestMigrationLockWaitDoesNotStallIngest(t *testing.T) {
	t.Parallel()
	for _, version := range []int{7, 10, 11, 19, 20} {
		t.Run(fmt.Sprintf("%03d", version), func(t *testing.T) {
			t.Parallel()
			migrationLockWait(t, version)
		})
	}
}

func migrationLockWait(t *testing.T, version int) {
	ctx := context.Background()
	url, conn := migratedTo(t, version-1)
	if _, err := conn.Exec(ctx, `INSERT INTO webhook_ingress.subscriptions (handler, provider_pattern) VALUES ('h', 'stripe')`); err != nil {
		t.Fatal(err)
	}
	connect := func() *pgx.Conn {
		c, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close(context.Background()) })
		return c
	}

	// A long reader of the log, as pg_dump or an auditor's report holds it.
	reader := connect()
	rtx, err := reader.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{`SELECT count(*) FROM webhook_ingress.events`, `SELECT count(*) FROM webhook_ingress.jobs`} {
		var n int64
		if err := rtx.QueryRow(ctx, q).Scan(&n); err != nil {
			t.Fatal(err)
		}
	}
	released := false
	release := func() {
		if !released {
			released = true
			_ = rtx.Rollback(ctx)
		}
	}
	defer release()

	migrator := connect()
	var pid uint32
	if err := migrator.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	migrated := make(chan error, 1)
	go func() {
		_, err := schema.MigrateTo(ctx, migrator, version)
		migrated <- err
	}()
	defer func() {
		release()
		// The migration ends once the reader has (or has given up).
		if err := <-migrated; err != nil {
			t.Logf("migration %03d: %v", version, err)
		}
	}()
	testwait.Eventually(t, 30*time.Second, "the migration waiting for a lock behind the reader", func() (bool, string) {
		var waiting int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE pid = $1 AND NOT granted`, int32(pid)).Scan(&waiting); err != nil {
			return false, err.Error()
		}
		return waiting > 0, fmt.Sprintf("%d locks waited for", waiting)
	})

	// Ingest, as the previous version's ingress writes.
	writer := connect()
	if _, err := writer.Exec(ctx, `SET ROLE `+schema.IngressRole); err != nil {
		t.Fatal(err)
	}
	const bound = 20 * time.Second // 012's lock_timeout (10 s) and slack
	ictx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	start := time.Now()
	_, err = writer.Exec(ictx, `INSERT INTO webhook_ingress.events
		(provider, scheme, external_event_id, event_type, headers, raw_body, signature_verified, secret_index, request_uri)
		VALUES ('stripe', 'stripe', 'evt_during_migrate', 'charge.succeeded', '{}', '{"id":"evt_during_migrate"}', true, 0, '/webhooks/stripe')`)
	if err != nil {
		if errors.Is(ictx.Err(), context.DeadlineExceeded) {
			var locks string
			_ = conn.QueryRow(ctx, `SELECT coalesce(string_agg(relation::regclass::text || ' ' || mode, ', '), '') FROM pg_locks WHERE pid = $1 AND NOT granted`, int32(pid)).Scan(&locks)
			t.Fatalf("migration %03d waits without a lock_timeout for %s behind a reader of the log, and ingest waits behind it: an insert into events was still blocked after %s (it waits as long as the reader runs)",
				version, locks, time.Since(start).Round(time.Second))
		}
		t.Fatalf("insert during migration: %v", err)
	}
	select {
	case err := <-migrated:
		migrated <- err // for the deferred wait
		if err == nil || !strings.Contains(err.Error(), "run inlet migrate again") {
			t.Fatalf("migration %03d behind a long reader: %v, want it refused, saying to run inlet migrate again", version, err)
		}
	case <-time.After(bound):
		t.Fatalf("migration %03d still waiting %s after the insert went through", version, bound)
	}
	var v int
	if err := conn.QueryRow(ctx, `SELECT max(version) FROM webhook_ingress.schema_migrations`).Scan(&v); err != nil || v != version-1 {
		t.Fatalf("schema at %d (%v) after the refused migration, want %d", v, err, version-1)
	}
}
