package tests

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/internal/testwait"
)

// TestReviewRetentionInterruptedLeavesDedupeKeysForever (review helper-120).
//
// Defect: inlet retention drops a period in one transaction (drop_partition)
// and deletes that period's dedupe keys (event_keys) afterwards, in a
// statement of its own (retention.expire -> RetentionDeleteKeys). When the
// run is interrupted between the two — Ctrl-C, a CronJob's deadline or
// systemd's stop (SIGTERM), a lost connection — while that DELETE runs
// (it seq-scans the whole unpartitioned event_keys: no index on
// received_at, so on a real log it runs for a long time), the partition is
// gone but its keys stay. Running inlet retention again never deletes them:
// the next run lists only partitions that still exist, and nothing else
// ever deletes from event_keys. The keys are orphaned for good: event_keys
// (documented "rows leave only with their event's partition") grows without
// bound, and a redelivery/backfill/reconcile of such a provider id is
// answered "duplicate" and not stored although the log no longer holds it
// (retention_test.go's TestRetentionDropsOnlyOldFinishedSealedPartitions
// relies on "with its key gone, the same provider id is a new event again").
//
// Expected: running inlet retention again finishes what the interrupted run
// left: no key of a dropped period survives.
//
// Suggested fix: delete the keys in the same transaction as the drop (after
// the detach, under the same locks or with the row-at-a-time semantics 044
// wanted), or make every run sweep the keys of all periods in retention_log
// (e.g. DELETE FROM event_keys k USING retention_log r WHERE k.received_at
// >= r.period_start AND k.received_at < r.period_end, with an index on
// event_keys(received_at)), so an interrupted run is completed by the next.
//
// The interruption is made deterministic: a transaction of the test holds a
// row lock on the old event's key, so retention's key DELETE waits (after
// the drop committed); the test then sends SIGTERM, as an operator's Ctrl-C
// or a scheduler's stop would.
func TestReviewRetentionInterruptedLeavesDedupeKeysForever(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	conn, env := sealedOldLog(t,
		`INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, raw_body, signature_verified, received_at) VALUES
			('stripe', 'stripe', 'evt_old_review', '{}', true, now() - interval '60 days')`,
		`UPDATE webhook_ingress.jobs SET status = 'completed'`,
	)
	var dbURL string
	for _, kv := range env {
		if len(kv) > len("DATABASE_URL=") && kv[:len("DATABASE_URL=")] == "DATABASE_URL=" {
			dbURL = kv[len("DATABASE_URL="):]
		}
	}
	blocker, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer blocker.Close(ctx)
	tx, err := blocker.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	var one int
	if err := tx.QueryRow(ctx, `SELECT 1 FROM webhook_ingress.event_keys
		WHERE provider = 'stripe' AND external_event_id = 'evt_old_review' FOR UPDATE`).Scan(&one); err != nil {
		t.Fatalf("lock the old event's key: %v", err)
	}

	p := start(t, env, "retention", "--max-age", "30d")
	// Wait until the period is dropped (committed) and retention's key
	// DELETE waits on the row the test holds.
	testwait.Eventually(t, 60*time.Second, "retention's key delete waiting", func() (bool, string) {
		var n int
		_ = conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE application_name = 'inlet-retention' AND query LIKE '%DELETE FROM webhook_ingress.event_keys%'
			  AND wait_event_type = 'Lock'`).Scan(&n)
		return n == 1, p.errOut()
	})
	var events int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM webhook_ingress.events WHERE external_event_id = 'evt_old_review'`).Scan(&events); err != nil || events != 0 {
		t.Fatalf("the old period is not dropped yet: %d events (%v)", events, err)
	}
	// The operator presses Ctrl-C / the scheduler stops the job.
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(60 * time.Second):
		t.Fatal("inlet retention did not exit after SIGTERM")
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("interrupted run: %v\nstdout:\n%s\nstderr:\n%s", p.err, p.out(), p.errOut())

	// Run it again, to completion.
	out, errOut, code := runInlet(t, env, "retention", "--max-age", "30d")
	if code != 0 {
		t.Fatalf("second inlet retention: exit %d\n%s%s", code, out, errOut)
	}
	t.Logf("second run:\n%s", out)

	var orphans int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM webhook_ingress.event_keys k
		WHERE NOT EXISTS (SELECT 1 FROM webhook_ingress.events e WHERE e.id = k.event_id AND e.received_at = k.received_at)`).Scan(&orphans); err != nil {
		t.Fatal(err)
	}
	// The consequence: the provider id of the dropped event is still
	// "stored" as far as dedupe is concerned.
	var stored int
	if err := conn.QueryRow(ctx, `WITH ins AS (INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, raw_body, signature_verified)
		VALUES ('stripe', 'stripe', 'evt_old_review', '{}', true) RETURNING id) SELECT count(*) FROM ins`).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	if orphans != 0 || stored != 1 {
		t.Fatalf("after an interrupted inlet retention and a complete second run: %d dedupe keys of dropped events left in event_keys "+
			"(want 0), and a redelivery of the dropped event stored %d rows (want 1: it is answered duplicate of an event the log no longer holds)",
			orphans, stored)
	}
}
