package schema_test

// What the roles that feed things outside this database (webhook_streamer,
// which runs the metadata reporter and publishes bus references) and the
// per-consumer roles (row-level security holds them to their handlers) can
// read of bodies, header values and error texts. The three reachable leaks
// a review proved (2026-12-06) are fixed: the streamer's error texts (036)
// and entity keys (037) here, a consumer role widening its own
// subscription (038) in consumer_scopes_test.go.

import (
	"context"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inlet-dev/inlet/internal/pgtest"
	"github.com/inlet-dev/inlet/schema"
)

const (
	leakSecretBody   = "cus_SECRET_BODY_VALUE"
	leakSecretHeader = "Bearer SECRET_HEADER_VALUE"
	leakSecretError  = "handler error quoting the body: card 4242424242424242"
)

// leakInsertEvent stores one event as ingress does (InsertEvent, payload copy
// on), its body naming a customer and its headers an Authorization value.
func leakInsertEvent(t *testing.T, pool *pgxpool.Pool, provider, externalID string) int64 {
	t.Helper()
	ctx := context.Background()
	body := `{"id":"` + externalID + `","data":{"object":{"customer":"` + leakSecretBody + `"}}}`
	headers := `{"Authorization":["` + leakSecretHeader + `"]}`
	if _, err := pool.Exec(ctx, schema.Query("InsertEvent"), provider, provider, externalID, "thing.happened", headers,
		[]byte(body), true, int16(0), "/webhooks/"+provider, "", true, nil, 0); err != nil {
		t.Fatal(err)
	}
	var id int64
	if err := pool.QueryRow(ctx, `SELECT id FROM webhook_ingress.events WHERE provider = $1 AND external_event_id = $2`,
		provider, externalID).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}

// leakStrings runs sql as role and returns its first column as text.
func leakStrings(t *testing.T, pool *pgxpool.Pool, role, sql string, args ...any) ([]string, error) {
	t.Helper()
	var got []string
	err := asRole(t, pool, role, func(tx pgx.Tx) error {
		rows, err := tx.Query(context.Background(), sql, args...)
		if err != nil {
			return err
		}
		got, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	})
	return got, err
}

// Checked correct: no function of the schema that reads a table is executable
// by PUBLIC; every SECURITY DEFINER function is granted only to the roles the
// docs name; the one view is readable only by the auditor and the operator;
// no application role holds any privilege on a partition (a new one
// included), where row-level security does not apply.
func TestCatalogGrantsReachNoBody(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `SELECT webhook_ingress.create_partitions('week', 2)`); err != nil {
		t.Fatal(err)
	}
	rows, err := pool.Query(ctx, `SELECT p.oid::regprocedure::text FROM pg_proc p
		WHERE p.pronamespace = 'webhook_ingress'::regnamespace AND has_function_privilege('public', p.oid, 'EXECUTE')
		ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	public, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	// order_key_of is pure (its arguments only). No trigger function either:
	// a role could attach one it may execute to a temporary table of its
	// own, and a SECURITY DEFINER one would then write as the owner (043).
	if want := []string{"webhook_ingress.order_key_of(text,jsonb,jsonb)"}; !slices.Equal(public, want) {
		t.Errorf("functions executable by PUBLIC: %q; want %q", public, want)
	}
	if _, err := leakStrings(t, pool, "webhook_streamer", `SELECT webhook_ingress.order_lanes_keep()::text`); err == nil {
		t.Errorf("order_lanes_keep callable directly")
	}

	rows, err = pool.Query(ctx, `SELECT p.proname || ' ' || r.rolname FROM pg_proc p CROSS JOIN pg_roles r
		WHERE p.pronamespace = 'webhook_ingress'::regnamespace AND p.prosecdef AND p.prorettype <> 'trigger'::regtype
		  AND r.rolname IN ('webhook_ingress_writer', 'webhook_streamer', 'webhook_worker', 'webhook_consumer', 'webhook_operator', 'webhook_sealer', 'webhook_auditor')
		  AND has_function_privilege(r.oid, p.oid, 'EXECUTE') ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	definers, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	// The claims run as their owner (036) so that the streamer's role
	// needs no table-wide SELECT for their tuple ids.
	want := []string{
		// 080: whether another consumer role is given a handler (a
		// boolean, no row).
		"another_role_given webhook_consumer", "another_role_given webhook_worker",
		// 067: whether another scoped role of a handler covers a pattern
		// (a boolean, no row).
		"another_role_may_own webhook_consumer", "another_role_may_own webhook_worker",
		// 078: the columns the audit seals of a range of events, payload
		// only as whether it is stored (never a body or a payload).
		"audit_events_to_seal webhook_sealer",
		"claim_handler_jobs webhook_streamer", "claim_jobs webhook_streamer", "claim_limited_jobs webhook_streamer",
		// 073: the reaper counts expired attempts against their handlers'
		// breakers (handler names in, circuits out; no job row).
		"count_expired_attempts webhook_streamer",
		"fan_out_filtered webhook_ingress_writer", "fold_event_types webhook_operator", "fold_event_types webhook_streamer",
		"give_back_attempt webhook_consumer", "give_back_attempt webhook_worker",
		// 059: a count of a handler's failures (a number, no row), a
		// consumer role's own handlers only.
		"handler_failures_since webhook_consumer", "handler_failures_since webhook_worker",
		// 046: whether a pattern lies in a role's scopes (a boolean, no row).
		"in_registrant_scope webhook_consumer", "in_registrant_scope webhook_worker",
		// 072: the reporter moves job_attempts' id sequence past the
		// control plane's cursor (a number in, a number out; never lower).
		"reporter_advance_attempt_ids webhook_streamer", "type_subscribed webhook_streamer"}
	if !slices.Equal(definers, want) {
		t.Errorf("SECURITY DEFINER functions and who may call them: %q; want %q", definers, want)
	}

	rows, err = pool.Query(ctx, `SELECT c.relname || ' ' || r.rolname FROM pg_class c CROSS JOIN pg_roles r
		WHERE c.relnamespace = 'webhook_ingress'::regnamespace AND (c.relispartition OR c.relkind IN ('v', 'm'))
		  AND r.rolname LIKE 'webhook\_%' AND r.rolname NOT LIKE 'webhook\_consumer\_t%'
		  AND has_table_privilege(r.oid, c.oid, 'SELECT,INSERT,UPDATE,DELETE,TRUNCATE,REFERENCES,TRIGGER') ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	held, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"attempts webhook_auditor", "attempts webhook_operator"}; !slices.Equal(held, want) {
		t.Errorf("privileges on views and partitions: %q; want %q", held, want)
	}
	var partitions int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_class WHERE relnamespace = 'webhook_ingress'::regnamespace AND relispartition`).Scan(&partitions); err != nil || partitions < 6 {
		t.Fatalf("%d partitions, %v: want the new periods' too", partitions, err)
	}
	// Nothing of the schema (tables, views, sequences) is granted to PUBLIC.
	rows, err = pool.Query(ctx, `SELECT c.relname || ' ' || a.privilege_type FROM pg_class c CROSS JOIN LATERAL aclexplode(c.relacl) a
		WHERE c.relnamespace = 'webhook_ingress'::regnamespace AND a.grantee = 0 ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	toPublic, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(toPublic) != 0 {
		t.Errorf("granted to PUBLIC: %q, %v; want none", toPublic, err)
	}
}

// Checked correct: a consumer role that switches to the group role
// webhook_consumer (it may: it is a member) sees no row at all, and cannot
// give back another handler's attempt through the SECURITY DEFINER
// give_back_attempt, which looks its caller up by the role setting.
func TestConsumerGroupRoleSeesNothing(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `INSERT INTO webhook_ingress.subscriptions (handler, provider_pattern) VALUES ('team-a', 'stripe'), ('team-b', 'github')`); err != nil {
		t.Fatal(err)
	}
	teamA := newConsumerRole(t, pool, "team-a")
	leakInsertEvent(t, pool, "github", "evt_grp")
	leakInsertEvent(t, pool, "stripe", "evt_grp")
	jobs := claimAll(t, pool)
	var other leasedJob
	for _, j := range jobs {
		if j.handler == "team-b" {
			other = j
		}
	}
	if other.id == 0 {
		t.Fatalf("no team-b job leased: %v", jobs)
	}
	err := asRole(t, pool, teamA, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SET LOCAL ROLE webhook_consumer`); err != nil {
			return err
		}
		for _, sql := range []string{
			`SELECT count(*) FROM webhook_ingress.events`,
			`SELECT count(*) FROM webhook_ingress.jobs`,
			`SELECT count(*) FROM webhook_ingress.job_attempts`,
		} {
			var n int64
			if err := tx.QueryRow(ctx, sql).Scan(&n); err != nil {
				return err
			}
			if n != 0 {
				t.Errorf("as webhook_consumer (from %s): %s = %d; want 0", teamA, sql, n)
			}
		}
		var given bool
		if err := tx.QueryRow(ctx, `SELECT webhook_ingress.give_back_attempt($1, $2, $3, $4)`,
			other.id, other.eventReceivedAt, other.attempt, other.leasedAt).Scan(&given); err != nil {
			return err
		}
		if given {
			t.Errorf("as webhook_consumer (from %s): gave back team-b's attempt", teamA)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// The reporter runs as webhook_streamer, the role of the one service that
// sends anything out of this database: it must not be able to read a
// handler's error text (jobs.last_error, job_attempts.error), which may
// quote a body. Before 036 it could; now its claims run as their owner and
// it holds SELECT on every other column only.
func TestStreamerReadsNoErrorText(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `INSERT INTO webhook_ingress.subscriptions (handler, provider_pattern) VALUES ('team-b', 'github')`); err != nil {
		t.Fatal(err)
	}
	leakInsertEvent(t, pool, "github", "evt_err")
	if _, err := pool.Exec(ctx, `UPDATE webhook_ingress.jobs SET status = 'failed', last_error = $1, last_error_class = 'handler_error'`, leakSecretError); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO webhook_ingress.job_attempts (job_id, event_received_at, attempt, started_at, outcome, error_class, error)
		SELECT id, event_received_at, 1, now(), 'failed', 'handler_error', $1 FROM webhook_ingress.jobs`, leakSecretError); err != nil {
		t.Fatal(err)
	}
	for _, q := range []struct{ what, sql string }{
		{"jobs.last_error", `SELECT last_error FROM webhook_ingress.jobs`},
		{"job_attempts.error", `SELECT error FROM webhook_ingress.job_attempts`},
	} {
		got, err := leakStrings(t, pool, "webhook_streamer", q.sql)
		if err == nil && slices.Contains(got, leakSecretError) {
			t.Errorf("webhook_streamer (the reporter's role) reads team-b's error text through %s: %q", q.what, got)
		} else if err != nil && !isPermissionDenied(err) {
			t.Errorf("%s: %v", q.what, err)
		}
	}
}

// An ordered handler's key is a value taken from the event's payload (a dot
// path) or headers (header:Name), copied into jobs.order_key and
// order_lanes.order_key by the owner's fan-out. webhook_streamer, which may
// not read raw_body, payload or headers, must not read the copies either (a
// customer identifier from the body, or any header value: Authorization
// here). Before 037 it could.
func TestStreamerReadsNoOrderKeyValue(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	for _, s := range [][2]string{{"by-customer", "data.object.customer"}, {"by-auth", "header:Authorization"}} {
		if _, err := pool.Exec(ctx, schema.Query("UpsertSubscription"), s[0], "stripe", "*", 5, nil, s[1], "block"); err != nil {
			t.Fatal(err)
		}
	}
	leakInsertEvent(t, pool, "stripe", "evt_ordered")

	// Control: the columns themselves are refused.
	for _, col := range []string{"raw_body", "payload", "headers"} {
		if _, err := leakStrings(t, pool, "webhook_streamer", `SELECT `+col+`::text FROM webhook_ingress.events`); !isPermissionDenied(err) {
			t.Fatalf("webhook_streamer reads events.%s directly: %v", col, err)
		}
	}
	for _, q := range []struct{ what, sql string }{
		{"jobs.order_key", `SELECT order_key FROM webhook_ingress.jobs ORDER BY handler`},
		{"order_lanes.order_key", `SELECT order_key FROM webhook_ingress.order_lanes ORDER BY handler`},
	} {
		got, err := leakStrings(t, pool, "webhook_streamer", q.sql)
		if err != nil && !isPermissionDenied(err) {
			t.Errorf("%s: %v", q.what, err)
			continue
		}
		if slices.Contains(got, leakSecretBody) {
			t.Errorf("webhook_streamer reads a body value (events.payload) through %s: %q", q.what, got)
		}
		if slices.Contains(got, leakSecretHeader) {
			t.Errorf("webhook_streamer reads a header value (events.headers) through %s: %q", q.what, got)
		}
	}
}
