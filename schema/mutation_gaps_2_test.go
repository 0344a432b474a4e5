package schema_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/inlet-dev/inlet/internal/pgtest"
)

// TestDropPartitionRefusesUnsealedEvents guards the retention
// invariant that drop_partition itself (the owner's explicit retention step,
// the last line behind inlet retention's own verdict) never drops a period
// whose events the audit log has not sealed yet.
//
// Mutant that survived every existing test (schema, retention, tests/ -run
// Retention): schema/migrations/044_drop_partition_lock_order.up.sql:55,
// `IF s.max_event_id > s.sealed_through THEN` changed to `IF false THEN`
// (the unsealed check skipped). The retention package decides Kept from
// partition_status before it calls drop_partition, so its tests never reach
// the function's own check; the schema tests that call drop_partition
// directly drop only empty periods, sealed by definition.
func TestDropPartitionRefusesUnsealedEvents(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	execAll(t, conn,
		`SELECT webhook_ingress.drop_partition(period_start) FROM webhook_ingress.partitions()`,
		`SELECT webhook_ingress.create_partitions('week', 2, now() - interval '70 days')`,
	)
	var oldStart time.Time
	if err := conn.QueryRow(ctx, `SELECT period_start FROM webhook_ingress.partitions() ORDER BY period_start LIMIT 1`).Scan(&oldStart); err != nil {
		t.Fatal(err)
	}
	// One event in the oldest period: no subscription, so no job (nothing
	// unfinished), and no audit checkpoint, so not sealed.
	if _, err := conn.Exec(ctx, `INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, raw_body, signature_verified, received_at)
		VALUES ('stripe', 'stripe', 'evt_old', '{}', true, $1::timestamptz + interval '1 hour')`, oldStart); err != nil {
		t.Fatal(err)
	}
	var open int64
	var maxID, sealed int64
	if err := conn.QueryRow(ctx, `SELECT open_jobs, max_event_id, sealed_through FROM webhook_ingress.partition_status($1)`, oldStart).
		Scan(&open, &maxID, &sealed); err != nil {
		t.Fatal(err)
	}
	if open != 0 || maxID <= sealed {
		t.Fatalf("setup: open_jobs %d, max_event_id %d, sealed_through %d; want no open job and an unsealed event", open, maxID, sealed)
	}
	_, err = conn.Exec(ctx, `SELECT * FROM webhook_ingress.drop_partition($1)`, oldStart)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "55006" {
		t.Fatalf("drop_partition of a period with an unsealed event: %v, want object_in_use (55006)", err)
	}
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM webhook_ingress.events WHERE external_event_id = 'evt_old'`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("the unsealed event after the refused drop: %d rows, %v; want 1", n, err)
	}
}

// TestFilteredFanOutSkipsDisabledSubscription guards the fan-out
// invariant that a disabled subscription gets no jobs, on the filtered path
// too: fan_out_filtered, handed a subscription id by an ingress whose
// compiled filters predate the subscription being switched off, must not
// route the event to it.
//
// Mutant that survived every existing test (schema and ingress, -run
// 'Filter|FanOut|Subscription'): schema/migrations/058_filtered_fan_out_merges.up.sql:58,
// `ON s.id = u.subscription_id AND s.enabled AND s.filter IS NOT NULL`
// changed to drop `AND s.enabled`. TestFanOut covers a disabled subscription
// only on the unfiltered trigger path; ingress never passes a disabled
// subscription's id in the tests, so the function's own check was never
// exercised.
func TestFilteredFanOutSkipsDisabledSubscription(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	execAll(t, conn,
		`INSERT INTO webhook_ingress.subscriptions (handler, provider_pattern, event_type_pattern, max_attempts, filter)
		 VALUES ('switched-off', 'stripe', '*', 5, 'event.type.startsWith("invoice.")')`,
		`UPDATE webhook_ingress.subscriptions SET enabled = false, updated_at = now() WHERE handler = 'switched-off'`,
	)
	// As ingress does: the event and fan_out_filtered in one transaction,
	// with the subscription ids whose filter passed (here read before the
	// subscription was switched off).
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO webhook_ingress.events
			(provider, scheme, external_event_id, event_type, raw_body, signature_verified)
			VALUES ('stripe', 'stripe', 'evt_1', 'invoice.paid', '{}', true)`); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `SELECT webhook_ingress.fan_out_filtered('{stripe}', '{evt_1}',
			ARRAY(SELECT id FROM webhook_ingress.subscriptions WHERE handler = 'switched-off'))`)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM webhook_ingress.jobs WHERE handler = 'switched-off'`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("jobs of the disabled filtered subscription: %d (%v), want 0", n, err)
	}
}
