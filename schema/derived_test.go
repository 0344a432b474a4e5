package schema_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/internal/pgtest"
)

// payload is a copy of raw_body: every role reads and writes it exactly as it
// reads and writes raw_body (the control plane's and the metadata reporter's
// role, webhook_streamer, and the sealer read neither; the ingress role
// inserts both), and occurred_at is inserted by the ingress role too.
func TestPayloadFollowsRawBodyGrants(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	for _, role := range append(matrixRoles, "webhook_consumer") {
		for _, priv := range []string{"SELECT", "INSERT", "UPDATE"} {
			var body, payload bool
			if err := pool.QueryRow(ctx, `SELECT has_column_privilege($1, 'webhook_ingress.events', 'raw_body', $2),
				has_column_privilege($1, 'webhook_ingress.events', 'payload', $2)`, role, priv).Scan(&body, &payload); err != nil {
				t.Fatal(err)
			}
			if body != payload {
				t.Errorf("%s %s: raw_body %v, payload %v", role, priv, body, payload)
			}
		}
	}
	for _, role := range []string{"webhook_streamer", "webhook_sealer"} {
		if err := asRole(t, pool, role, query(`SELECT payload FROM webhook_ingress.events`)); !isPermissionDenied(err) {
			t.Errorf("%s reads payload: %v", role, err)
		}
	}
	if err := asRole(t, pool, "webhook_ingress_writer", exec(`INSERT INTO webhook_ingress.events
		(provider, scheme, external_event_id, raw_body, signature_verified, occurred_at, payload)
		VALUES ('stripe', 'stripe', 'evt_p', '{"a":1}', true, now(), '{"a":1}')`)); err != nil {
		t.Errorf("ingress inserts occurred_at and payload: %v", err)
	}
}

// The only UPDATE events allows: the owner's backfill (webhook_ingress.backfill
// = 'derived') filling occurred_at and payload where NULL, with payload the
// parsed raw_body and nothing else changed.
func TestDerivedBackfillIsTheOnlyUpdate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	if _, err := pool.Exec(ctx, `INSERT INTO webhook_ingress.events
		(provider, scheme, external_event_id, raw_body, signature_verified)
		VALUES ('stripe', 'stripe', 'evt_b', '{"id":"evt_b","created":1700000000}', true)`); err != nil {
		t.Fatal(err)
	}
	backfill := func(sql string) func(pgx.Tx) error {
		return func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `SET LOCAL webhook_ingress.backfill = 'derived'`); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, sql)
			return err
		}
	}
	denied := map[string]func(pgx.Tx) error{
		"without the setting":  exec(`UPDATE webhook_ingress.events SET occurred_at = now()`),
		"another column":       backfill(`UPDATE webhook_ingress.events SET occurred_at = now(), event_type = 'forged'`),
		"payload not the body": backfill(`UPDATE webhook_ingress.events SET payload = '{"id":"forged"}'`),
		"the body":             backfill(`UPDATE webhook_ingress.events SET raw_body = '{}'`),
		"delete":               backfill(`DELETE FROM webhook_ingress.events`),
		"as the operator": func(tx pgx.Tx) error {
			_, _ = tx.Exec(ctx, "SET LOCAL ROLE webhook_operator")
			return backfill(`UPDATE webhook_ingress.events SET occurred_at = now()`)(tx)
		},
		"a partition, as worker": func(tx pgx.Tx) error {
			_, _ = tx.Exec(ctx, "SET LOCAL ROLE webhook_worker")
			return backfill(`UPDATE webhook_ingress.events_default SET occurred_at = now()`)(tx)
		},
	}
	for name, f := range denied {
		if err := asRole(t, pool, "", f); !isPermissionDenied(err) {
			t.Errorf("%s: want permission denied, got %v", name, err)
		}
	}
	if err := asRole(t, pool, "", backfill(`UPDATE webhook_ingress.events
		SET occurred_at = to_timestamp(1700000000), payload = convert_from(raw_body, 'UTF8')::jsonb`)); err != nil {
		t.Fatalf("the backfill's own update: %v", err)
	}
	// Once filled, a value is never changed again.
	err := asRole(t, pool, "", func(tx pgx.Tx) error {
		if err := backfill(`UPDATE webhook_ingress.events SET occurred_at = to_timestamp(1700000000)`)(tx); err != nil {
			return err
		}
		return backfill(`UPDATE webhook_ingress.events SET occurred_at = now()`)(tx)
	})
	if !isPermissionDenied(err) {
		t.Errorf("changing a filled occurred_at: want permission denied, got %v", err)
	}
}

// The payload index exists on the parent and on every partition of a fresh
// database, so it is valid and --where queries use it.
func TestPayloadIndexValid(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	var valid bool
	var missing int
	if err := pool.QueryRow(context.Background(), `SELECT
		(SELECT indisvalid FROM pg_index WHERE indexrelid = 'webhook_ingress.idx_events_payload'::regclass),
		(SELECT count(*) FROM pg_inherits p WHERE p.inhparent = 'webhook_ingress.events'::regclass
		   AND NOT EXISTS (SELECT FROM pg_inherits i JOIN pg_index x ON x.indexrelid = i.inhrelid
		                   WHERE i.inhparent = 'webhook_ingress.idx_events_payload'::regclass AND x.indrelid = p.inhrelid))`).
		Scan(&valid, &missing); err != nil {
		t.Fatal(err)
	}
	if !valid || missing != 0 {
		t.Errorf("idx_events_payload valid %v, %d partitions without it", valid, missing)
	}
}
