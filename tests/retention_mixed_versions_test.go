package tests

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// A period dropped after the upgrade to 054 by an inlet retention of the
// previous version, whose key deletion did not happen (interrupted, or its
// DELETE failed), keeps its dedupe keys for good: this version's inlet
// retention never deletes them.
//
// A period an old inlet retention dropped after the upgrade has its dedupe
// keys deleted by the new one (057).
//
// Regression test (review helper-134; fixed: the text describes the
// behaviour before the fix). 054 promises "a dropped period's dedupe keys
// are deleted even when the inlet retention that dropped it was
// interrupted", and seeds retention_keys_due from retention_log once, at
// migrate time. After that a period is recorded only by this version's Go
// code (retention/retention.go: RetentionKeysDue after RetentionDropPartition
// in the drop's transaction), not by drop_partition, which writes
// retention_log. During a rolling upgrade `inlet migrate` runs first, and a
// retention CronJob / systemd timer of the previous version (ad36342) keeps
// running until its image is replaced: it drops a period (retention_log
// row, no retention_keys_due row) and then deletes the keys in a statement
// of its own (RetentionDeleteKeys). When that run is stopped in between, or
// the DELETE fails (the old binary even reports "dropped; its dedupe keys
// stay"), no later run of either version deletes them: the old one lists
// only partitions that exist, the new one only retention_keys_due. A
// provider's redelivery of a dropped event is then answered "duplicate" and
// not stored, for ever, and event_keys keeps the keys — the defect 054 fixed
// (TestRetentionInterruptedLeavesNoDedupeKeys), back for every drop by an old
// binary after the migration. docs/database.md says an interrupted run's
// keys go at the next run, without this exception, and docs/pipeline.md's
// upgrade section says nothing of 054.
//
// Here: the previous version's drop, its SQL verbatim (RetentionLockTimeout,
// RetentionSerialize, RetentionDropPartition in one transaction), commits,
// and its key DELETE never runs; then this version's inlet retention runs to
// completion.
//
// Expected: no key of a dropped period is left and a redelivery of the
// dropped event is stored (as after an interrupted run of this version).
// Got: the key stays; the redelivery inserts nothing.
func TestRetentionOldBinaryDropIsSweptByTheNew(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	conn, env := sealedOldLog(t,
		`INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, raw_body, signature_verified, received_at) VALUES
			('stripe', 'stripe', 'evt_old_mixed', '{}', true, now() - interval '60 days')`,
		`UPDATE webhook_ingress.jobs SET status = 'completed'`,
	)
	var periodStart time.Time
	if err := conn.QueryRow(ctx, `SELECT p.period_start FROM webhook_ingress.partitions() p
		JOIN webhook_ingress.events e ON e.received_at >= p.period_start AND e.received_at < p.period_end
		WHERE e.external_event_id = 'evt_old_mixed'`).Scan(&periodStart); err != nil {
		t.Fatalf("the old event's period: %v", err)
	}

	// The previous version's inlet retention (ad36342 retention.go inTx +
	// RetentionDropPartition), against the schema at 056.
	if err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_catalog.set_config('lock_timeout', '5000ms', true)`); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `SELECT pg_catalog.pg_advisory_xact_lock(x'7061727469746e73'::bigint)`); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `SELECT events, jobs, attempts, sealed_through FROM webhook_ingress.drop_partition($1::timestamptz)`, periodStart)
		return err
	}); err != nil {
		t.Fatalf("old retention's drop: %v", err)
	}
	// ... and its RetentionDeleteKeys never runs (stopped by the CronJob's
	// deadline, a lost connection, or the DELETE failed).

	// This version's inlet retention, to completion.
	out, errOut, code := runInlet(t, env, "retention", "--max-age", "30d")
	if code != 0 {
		t.Fatalf("inlet retention: exit %d\n%s%s", code, out, errOut)
	}
	t.Logf("new inlet retention:\n%s", out)

	orphans, stored := droppedKeysLeft(t, conn, "evt_old_mixed")
	if orphans != 0 || stored != 1 {
		t.Fatalf("a period dropped by the previous version's inlet retention after the upgrade, its key delete not run, then this version's "+
			"inlet retention run to completion: %d dedupe keys of dropped events left (want 0), a redelivery of the dropped event stored %d rows "+
			"(want 1: it is answered duplicate of an event the log no longer holds)", orphans, stored)
	}
}
