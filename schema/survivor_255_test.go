package schema_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/inlet-dev/inlet/internal/pgtest"
	"github.com/inlet-dev/inlet/schema/queries"
)

// Guarantee: events is append-only (DESIGN, "Invariants"); the one UPDATE
// events_guard (012_occurred_at_payload) lets through is the owner's
// backfill filling occurred_at and payload where NULL, changing no other
// column. Here every other column of events, read from the catalog (but
// the generated body_sha256 and the identity id, which no UPDATE may set), is
// changed under the backfill's own setting (alongside a legitimate fill),
// as the owner: each must be refused with 42501.
//
// Mutants (each survived every test of ./schema before this one):
// schema/migrations/012_occurred_at_payload.up.sql:98-99, the comparison
// (to_jsonb(OLD) - 'occurred_at' - 'payload' - 'body_sha256') also
// subtracting 'headers', or 'received_at': the backfill setting then let
// the signed request's headers, or its receive time, be rewritten.
// TestDerivedBackfillIsTheOnlyUpdate tries event_type and raw_body only,
// and TestEventsAreAppendOnlyForEveryRole never sets the backfill setting,
// so no test changed any other column through the guard's one opening.
func TestSurvivor255_BackfillChangesNoOtherEventColumn(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	if _, err := pool.Exec(ctx, `INSERT INTO webhook_ingress.events
		(provider, scheme, external_event_id, event_type, headers, request_uri, raw_body, signature_verified, secret_index, trace_parent)
		VALUES ('stripe', 'stripe', 'evt_s255', 'invoice.paid', '{"Stripe-Signature":["t=1,v1=ab"]}', '/webhooks/stripe',
		        '{"id":"evt_s255","created":1700000000}', true, 0, '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01')`); err != nil {
		t.Fatal(err)
	}
	rows, err := pool.Query(ctx, `SELECT a.attname::text, format_type(a.atttypid, NULL)
		FROM pg_attribute a WHERE a.attrelid = 'webhook_ingress.events'::regclass AND a.attnum > 0 AND NOT a.attisdropped
		  AND a.attgenerated = '' AND a.attidentity <> 'a' AND a.attname NOT IN ('occurred_at', 'payload') ORDER BY a.attnum`)
	if err != nil {
		t.Fatal(err)
	}
	type column struct{ name, typ string }
	cols, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (column, error) {
		var c column
		return c, r.Scan(&c.name, &c.typ)
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"headers", "received_at", "raw_body", "provider", "external_event_id", "signature_verified"} {
		found := false
		for _, c := range cols {
			found = found || c.name == want
		}
		if !found {
			t.Fatalf("events has no column %s (columns %v)", want, cols)
		}
	}
	for _, c := range cols {
		id := pgx.Identifier{c.name}.Sanitize()
		var change string
		switch c.typ {
		case "text", "character varying":
			change = `coalesce(` + id + `, '') || '-forged'`
		case "bytea":
			// A trailing space: raw_body stays the same JSON, so only the
			// comparison of the other columns can refuse it.
			change = `coalesce(` + id + `, ''::bytea) || '\x20'::bytea`
		case "jsonb":
			change = `'{"X-Forged":["1"]}'::jsonb`
		case "timestamp with time zone":
			// A microsecond: the row stays in its partition, so only the
			// UPDATE trigger decides (a move would fire the DELETE one).
			change = `coalesce(` + id + `, now()) + interval '1 microsecond'`
		case "boolean":
			change = `NOT coalesce(` + id + `, false)`
		case "smallint", "integer", "bigint":
			change = `coalesce(` + id + `, 0) + 1`
		case "xid8":
			change = `CASE WHEN ` + id + ` IS NULL THEN pg_current_xact_id() END`
		default:
			t.Errorf("events.%s is of type %s: say here how to change it", c.name, c.typ)
			continue
		}
		sql := `UPDATE webhook_ingress.events SET occurred_at = to_timestamp(1700000000),
			payload = convert_from(raw_body, 'UTF8')::jsonb, ` + id + ` = ` + change
		err := asRole(t, pool, "", func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `SET LOCAL webhook_ingress.backfill = 'derived'`); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, sql)
			return err
		})
		if !isPermissionDenied(err) {
			t.Errorf("the backfill's update changing events.%s (%s): want permission denied (42501), got %v", c.name, c.typ, err)
		}
	}
}

// Guarantee: once payload (the auditors' JSON copy) is stored, no role, the
// owner's backfill included, can change or erase it (events_guard: the
// backfill fills payload only where it was NULL).
//
// Mutant (survived every test of ./schema before this one):
// schema/migrations/012_occurred_at_payload.up.sql:95, the line
// "AND (OLD.payload IS NULL OR NEW.payload IS NOT DISTINCT FROM OLD.payload)"
// deleted: the backfill setting then let a stored payload be set to NULL.
// TestDerivedBackfillIsTheOnlyUpdate checks "once filled, never changed
// again" for occurred_at only; its payload cases start from a NULL payload.
func TestSurvivor255_BackfillCannotEraseAStoredPayload(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	if _, err := pool.Exec(ctx, `INSERT INTO webhook_ingress.events
		(provider, scheme, external_event_id, raw_body, signature_verified, occurred_at, payload)
		VALUES ('stripe', 'stripe', 'evt_p255', '{"id":"evt_p255"}', true, to_timestamp(1700000000), '{"id":"evt_p255"}')`); err != nil {
		t.Fatal(err)
	}
	for name, sql := range map[string]string{
		"erase the payload":    `UPDATE webhook_ingress.events SET payload = NULL`,
		"erase occurred_at":    `UPDATE webhook_ingress.events SET occurred_at = NULL`,
		"replace the payload":  `UPDATE webhook_ingress.events SET payload = '{"id":"forged"}'`,
		"erase both at once":   `UPDATE webhook_ingress.events SET payload = NULL, occurred_at = NULL`,
		"erase, keep the time": `UPDATE webhook_ingress.events SET payload = NULL, occurred_at = to_timestamp(1700000000)`,
	} {
		err := asRole(t, pool, "", func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `SET LOCAL webhook_ingress.backfill = 'derived'`); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, sql)
			return err
		})
		if !isPermissionDenied(err) {
			t.Errorf("%s under the backfill's setting: want permission denied (42501), got %v", name, err)
		}
	}
	var payload string
	if err := pool.QueryRow(ctx, `SELECT payload::text FROM webhook_ingress.events WHERE external_event_id = 'evt_p255'`).Scan(&payload); err != nil || payload != `{"id": "evt_p255"}` {
		t.Errorf("payload after the attempts: %q, %v", payload, err)
	}
}

// Guarantee: every SECURITY DEFINER function of the schema (they run with
// the owner's rights: the claims, give_back_attempt, the fan-out and dedupe
// triggers, handler_failures_since, ...) pins its search_path, with pg_temp
// named last, so a caller's own search_path or temporary objects cannot
// change what the owner's code resolves (PostgreSQL's "Writing SECURITY
// DEFINER Functions Safely"; without pg_temp named, the caller's temporary
// tables are searched first).
//
// Mutant (survived every test of ./schema before this one):
// schema/migrations/059_breaker_counts_every_role.up.sql:16,
// handler_failures_since's "SET search_path = pg_catalog, pg_temp" removed
// (the function then runs with its caller's search_path as the owner).
// TestCatalogGrantsReachNoBody checks who may call the SECURITY DEFINER
// functions, and the plan tests check plan_cache_mode and jit in proconfig,
// but no test read the search_path of one.
func TestSurvivor255_SecurityDefinerFunctionsPinSearchPath(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	rows, err := pool.Query(ctx, `SELECT p.oid::regprocedure::text, coalesce(p.proconfig, '{}')
		FROM pg_proc p WHERE p.pronamespace = 'webhook_ingress'::regnamespace AND p.prosecdef ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for rows.Next() {
		var name string
		var config []string
		if err := rows.Scan(&name, &config); err != nil {
			t.Fatal(err)
		}
		n++
		var path string
		for _, c := range config {
			if v, ok := strings.CutPrefix(c, "search_path="); ok {
				path = v
			}
		}
		var parts []string
		for _, p := range strings.Split(path, ",") {
			parts = append(parts, strings.Trim(strings.TrimSpace(p), `"`))
		}
		if path == "" || parts[0] != "pg_catalog" || parts[len(parts)-1] != "pg_temp" {
			t.Errorf("SECURITY DEFINER %s runs with %q: want search_path set, pg_catalog first and pg_temp last", name, config)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if n < 10 {
		t.Fatalf("%d SECURITY DEFINER functions in webhook_ingress: want the claims, the triggers and the rest", n)
	}
}

// Guarantee: row-level security is what holds a per-consumer role to its own
// handlers' jobs and bodies (DESIGN: "enforced in PostgreSQL, not by the
// SDK"), and PostgreSQL does not apply it to a superuser or a BYPASSRLS
// role; so create_consumer_role (inlet roles create-consumer) refuses to
// give handlers to such a role, even one that is a member of
// webhook_consumer, with 22023 and nothing recorded.
//
// Mutant (survived every test of ./schema and tests/ TestRolesCreateListDrop):
// schema/migrations/038_consumer_role_scopes.up.sql:166-168, the branch
// "ELSIF r.rolsuper OR r.rolbypassrls THEN RAISE EXCEPTION ..." deleted:
// a BYPASSRLS member of webhook_consumer was then made a consumer role
// whose consumer reads every handler's jobs and every event's body. No test
// ever passed an existing superuser or BYPASSRLS role to the function.
func TestSurvivor255_ConsumerRoleRefusesARoleRowSecurityCannotHold(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	for _, attr := range []string{"BYPASSRLS", "SUPERUSER"} {
		role := fmt.Sprintf("webhook_consumer_t255_%s_%d_%d", strings.ToLower(attr), os.Getpid(), roleSeq.Add(1))
		if _, err := pool.Exec(ctx, fmt.Sprintf(`CREATE ROLE %s NOLOGIN %s`, role, attr)); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if _, err := pool.Exec(context.Background(), `DROP ROLE IF EXISTS `+role); err != nil {
				t.Errorf("drop role %s: %v", role, err)
			}
		})
		if _, err := pool.Exec(ctx, fmt.Sprintf(`GRANT webhook_consumer TO %s`, role)); err != nil {
			t.Fatal(err)
		}
		_, err := queries.New(pool).CreateConsumerRole(ctx, queries.CreateConsumerRoleParams{Role: role, Handlers: []string{"h255"},
			ScopeProviders: []string{"*"}, ScopeTypes: []string{"*"}})
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "22023" {
			t.Errorf("create_consumer_role of a %s member of webhook_consumer: %v; want refused (22023)", attr, err)
		}
		var rows int
		if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM webhook_ingress.consumer_roles WHERE role_name = $1)
			+ (SELECT count(*) FROM webhook_ingress.consumer_role_scopes WHERE role_name = $1)`, role).Scan(&rows); err != nil || rows != 0 {
			t.Errorf("%s: %d rows of handlers and scopes recorded, %v; want none", role, rows, err)
		}
	}
}
