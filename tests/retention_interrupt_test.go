package tests

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/internal/testwait"
)

// An inlet retention interrupted after dropping a period and before
// deleting its dedupe keys leaves them to the next run, which deletes them.
//
// Regression test (review helper-120; fixed: the text describes the
// behaviour before the fix). inlet retention dropped a period in one
// transaction (drop_partition) and deleted that period's dedupe keys
// (event_keys) afterwards, in a statement of its own. When the run was
// interrupted between the two (Ctrl-C, a CronJob's deadline or systemd's
// stop, a lost connection) while that DELETE ran (a scan of the whole
// event_keys), the partition was gone but its keys stayed for good: the
// next run listed only partitions that still existed. event_keys grew
// without bound, and a redelivery, backfill or reconcile of such a provider
// id was answered "duplicate" and not stored although the log no longer held
// it. (054: the drop records its period; every run deletes the keys of the
// periods recorded.)
//
// Expected: running inlet retention again finishes what the interrupted run
// left: no key of a dropped period survives.
//
// The interruption is made deterministic: a transaction of the test holds a
// row lock on the old event's key, so retention's key DELETE waits (after
// the drop committed); the test then sends SIGTERM, as an operator's Ctrl-C
// or a scheduler's stop would.
func TestRetentionInterruptedLeavesNoDedupeKeys(t *testing.T) {
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

	// The consequence: the provider id of the dropped event is still
	// "stored" as far as dedupe is concerned.
	orphans, stored := droppedKeysLeft(t, conn, "evt_old_review")
	if orphans != 0 || stored != 1 {
		t.Fatalf("after an interrupted inlet retention and a complete second run: %d dedupe keys of dropped events left in event_keys "+
			"(want 0), and a redelivery of the dropped event stored %d rows (want 1: it is answered duplicate of an event the log no longer holds)",
			orphans, stored)
	}
}

// droppedKeysLeft counts the dedupe keys whose event is gone (a dropped
// period's left behind), and stores a redelivery of the stripe event
// externalID: 1 row stored when its key went with its period, 0 when it is
// answered duplicate of an event the log no longer holds.
func droppedKeysLeft(t *testing.T, conn *pgx.Conn, externalID string) (orphans, stored int) {
	t.Helper()
	ctx := context.Background()
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM webhook_ingress.event_keys k
		WHERE NOT EXISTS (SELECT 1 FROM webhook_ingress.events e WHERE e.id = k.event_id AND e.received_at = k.received_at)`).Scan(&orphans); err != nil {
		t.Fatal(err)
	}
	if err := conn.QueryRow(ctx, `WITH ins AS (INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, raw_body, signature_verified)
		VALUES ('stripe', 'stripe', $1, '{}', true) RETURNING id) SELECT count(*) FROM ins`, externalID).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	return orphans, stored
}
