package schema_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/internal/pgtest"
	"github.com/inlet-dev/inlet/schema/queries"
)

var (
	matrixRoles  = []string{"webhook_ingress_writer", "webhook_streamer", "webhook_worker", "webhook_consumer", "webhook_operator", "webhook_sealer", "webhook_auditor"}
	matrixTables = []string{"events", "event_keys", "jobs", "job_attempts", "attempts", "subscriptions", "consumers", "consumer_roles", "audit_checkpoints", "audit_verifications", "retention_log", "schema_migrations", "event_types", "event_type_arrivals", "handler_limits", "reconcile_runs", "order_lanes", "consumer_role_scopes", "derived_backfill", "filter_version", "source_alerts", "retention_keys_due"}
	matrixPrivs  = []string{"SELECT", "INSERT", "UPDATE", "DELETE", "TRUNCATE"}
)

// wantMatrix is every role × table × privilege: S I U D T where held on the
// whole table, s i u where held on some columns only (listed in
// wantColumns), - where not held. attempts is a view (010_lease_token) of
// every finished attempt: job_attempts' rows and the successes kept on job
// rows; consumers (010 too) is where consumer services say they are alive,
// the one table a role may DELETE from (its rows expire). webhook_consumer
// (011_consumer_roles) holds webhook_worker's grants for the per-consumer
// roles, its members, which row-level security narrows to their own
// handlers' rows (consumer_roles says which; see
// TestConsumerRolesCannotTouchEachOthersRows). event_types (013) is every
// (source, event type) seen: the streamer folds it (through
// fold_event_types, owner's rights) and marks new types alerted; only
// fold_event_types and the events_type_seen trigger write it and its
// arrivals. audit_verifications (016) notes what each inlet audit verify
// found: the operator records it, the streamer reads it for its metrics.
// The ingress role inserts every column of an event but received_at, which
// only the database's clock sets (028_ingress_received_at; see
// TestIngressCannotChooseReceivedAt). reconcile_runs (018) records each inlet
// reconcile run: the ingress
// role, which reconcile stores events as, inserts a run when it starts and
// fills in its counts when it ends, reads event_keys' two key columns to
// find what the log lacks, and reads when the periods in retention_log end
// and were dropped (074), to compare nothing retention dropped. order_lanes (020) is kept by triggers on jobs
// (owner's rights): the streamer's claim and the operator's DLQ read it.
// consumer_role_scopes (038) are the events each consumer role may
// subscribe to and read; inlet roles (the owner) writes them, and the
// consumer roles' policies read their own; the streamer reads both (064) to
// publish a shared handler's jobs per role. derived_backfill (012) is the
// progress of inlet backfill stored (the owner writes it); filter_version
// (040) the version of the subscriptions' filters ingress reads;
// source_alerts (045) the silence alerts the streamer sent; retention_keys_due
// (054) the dropped periods whose dedupe keys wait to be deleted (inlet
// retention, the owner). The auditor reads every table and the operator
// every one but event_type_arrivals (055 granted the last missing ones), and
// the test fails for a table of the schema missing here.
// docs/database.md shows the same table.
const wantMatrix = `
| role | events | event_keys | jobs | job_attempts | attempts | subscriptions | consumers | consumer_roles | audit_checkpoints | audit_verifications | retention_log | schema_migrations | event_types | event_type_arrivals | handler_limits | reconcile_runs | order_lanes | consumer_role_scopes | derived_backfill | filter_version | source_alerts | retention_keys_due |
|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|
| webhook_ingress_writer | si--- | s---- | ----- | ----- | ----- | s---- | ----- | ----- | ----- | ----- | s---- | S---- | ----- | ----- | ----- | Siu-- | ----- | ----- | ----- | S---- | ----- | ----- |
| webhook_streamer | s---- | ----- | s-u-- | si--- | ----- | s---- | S---- | S---- | ----- | S---- | ----- | S---- | S-u-- | ----- | S-u-- | ----- | ----- | S---- | ----- | ----- | SIU-- | ----- |
| webhook_worker | S---- | ----- | S-u-- | Si--- | ----- | Siu-- | SIUD- | ----- | ----- | ----- | ----- | S---- | ----- | ----- | SiuD- | ----- | ----- | ----- | ----- | ----- | ----- | ----- |
| webhook_consumer | S---- | ----- | S-u-- | Si--- | ----- | Siu-- | SIUD- | S---- | ----- | ----- | ----- | S---- | ----- | ----- | SiuD- | ----- | ----- | S---- | ----- | ----- | ----- | ----- |
| webhook_operator | S---- | S---- | Siu-- | Si--- | S---- | S-u-- | S---- | S---- | S---- | SI--- | S---- | S---- | S---- | ----- | S---- | S---- | S---- | S---- | S---- | S---- | S---- | S---- |
| webhook_sealer | s---- | ----- | ----- | ----- | ----- | ----- | ----- | ----- | SI--- | ----- | ----- | S---- | ----- | ----- | ----- | ----- | ----- | ----- | ----- | ----- | ----- | ----- |
| webhook_auditor | S---- | S---- | S---- | S---- | S---- | S---- | S---- | S---- | S---- | S---- | S---- | S---- | S---- | S---- | S---- | S---- | S---- | S---- | S---- | S---- | S---- | S---- |
`

// wantColumns are the column-level grants (the lower-case cells).
const wantColumns = `
webhook_ingress_writer SELECT events: provider, external_event_id
webhook_ingress_writer INSERT events: provider, scheme, external_event_id, event_type, headers, request_uri, raw_body, signature_verified, secret_index, trace_parent, occurred_at, payload
webhook_ingress_writer SELECT event_keys: provider, external_event_id
webhook_ingress_writer SELECT subscriptions: id, handler, provider_pattern, event_type_pattern, enabled, filter
webhook_ingress_writer SELECT retention_log: period_end, dropped_at
webhook_ingress_writer INSERT reconcile_runs: source, api, window_since, window_until, dry_run, scope
webhook_ingress_writer UPDATE reconcile_runs: finished_at, listed, already_stored, missing, stored, duplicates, by_type, error
webhook_streamer SELECT events: id, provider, scheme, external_event_id, event_type, received_at, signature_verified
webhook_streamer SELECT jobs: id, event_id, event_received_at, handler, provider, event_type, status, attempt_count, max_attempts, next_attempt_at, lease_holder_id, lease_expires_at, attempted_at, worker_id, last_error_class, created_at, updated_at, completed_at, trace_parent, completed_attempt_id, order_at
webhook_streamer UPDATE jobs: status, attempt_count, next_attempt_at, lease_holder_id, lease_expires_at, attempted_at, worker_id, last_error, last_error_class, updated_at
webhook_streamer SELECT job_attempts: id, job_id, event_received_at, attempt, worker_id, started_at, finished_at, outcome, error_class, duration_ms
webhook_streamer INSERT job_attempts: job_id, event_received_at, attempt, worker_id, started_at, finished_at, outcome, error_class, error
webhook_streamer SELECT subscriptions: handler, enabled, order_key, order_policy
webhook_streamer UPDATE event_types: alerted_at, alerted_routed, reported_at
webhook_streamer UPDATE handler_limits: tokens, refilled_at, circuit, circuit_changed_at, next_probe_at
webhook_worker UPDATE jobs: status, next_attempt_at, lease_holder_id, lease_expires_at, worker_id, last_error, last_error_class, updated_at, completed_at, completed_attempt_id
webhook_worker INSERT job_attempts: job_id, event_received_at, attempt, worker_id, started_at, finished_at, outcome, error_class, error
webhook_worker INSERT subscriptions: handler, provider_pattern, event_type_pattern, max_attempts, enabled, updated_at, filter, order_key, order_policy
webhook_worker UPDATE subscriptions: max_attempts, enabled, updated_at, filter, order_key, order_policy
webhook_worker INSERT handler_limits: handler, rate_per_second, burst, max_in_flight, breaker_failures, breaker_probe_interval, tokens, updated_at
webhook_worker UPDATE handler_limits: rate_per_second, burst, max_in_flight, breaker_failures, breaker_probe_interval, tokens, consecutive_failures, circuit, circuit_changed_at, next_probe_at, updated_at, last_success_at
webhook_consumer UPDATE jobs: status, next_attempt_at, lease_holder_id, lease_expires_at, worker_id, last_error, last_error_class, updated_at, completed_at, completed_attempt_id
webhook_consumer INSERT job_attempts: job_id, event_received_at, attempt, worker_id, started_at, finished_at, outcome, error_class, error
webhook_consumer INSERT subscriptions: handler, provider_pattern, event_type_pattern, max_attempts, enabled, updated_at, filter, order_key, order_policy
webhook_consumer UPDATE subscriptions: max_attempts, enabled, updated_at, filter, order_key, order_policy
webhook_consumer INSERT handler_limits: handler, rate_per_second, burst, max_in_flight, breaker_failures, breaker_probe_interval, tokens, updated_at
webhook_consumer UPDATE handler_limits: rate_per_second, burst, max_in_flight, breaker_failures, breaker_probe_interval, tokens, consecutive_failures, circuit, circuit_changed_at, next_probe_at, updated_at, last_success_at
webhook_operator INSERT jobs: event_id, event_received_at, handler, provider, event_type, max_attempts, order_key, order_at
webhook_operator UPDATE jobs: status, attempt_count, next_attempt_at, lease_holder_id, lease_expires_at, worker_id, last_error, last_error_class, updated_at, completed_at, completed_attempt_id
webhook_operator INSERT job_attempts: id, job_id, event_received_at, attempt, worker_id, started_at, finished_at, outcome
webhook_operator UPDATE subscriptions: enabled, updated_at
webhook_sealer SELECT events: id, provider, scheme, external_event_id, event_type, received_at, headers, request_uri, body_sha256, signature_verified, secret_index, occurred_at
`

// The privilege matrix, read from the catalog and printed; every privilege
// not held is also tried for real and must fail with 42501. The copy in
// docs/database.md must match.
func TestPrivilegeMatrix(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	seed(t, pool)

	// Every table and view of the schema is in the matrix: a table added
	// without the grants of its readers (054's retention_keys_due, review
	// helper-121) is seen here.
	rows, err := pool.Query(ctx, `SELECT c.relname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = 'webhook_ingress' AND c.relkind IN ('r', 'p', 'v') AND NOT c.relispartition ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	all, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	for _, table := range all {
		if !slices.Contains(matrixTables, table) {
			t.Errorf("table webhook_ingress.%s is not in the privilege matrix (matrixTables, wantMatrix, docs/database.md): say who reads and writes it", table)
		}
	}

	var matrix, columns strings.Builder
	matrix.WriteString("\n| role | " + strings.Join(matrixTables, " | ") + " |\n|" + strings.Repeat("---|", len(matrixTables)+1) + "\n")
	columns.WriteString("\n")
	for _, role := range matrixRoles {
		matrix.WriteString("| " + role + " |")
		for _, table := range matrixTables {
			rel := "webhook_ingress." + table
			cell := ""
			for _, priv := range matrixPrivs {
				var whole, some bool
				var cols []string
				err := pool.QueryRow(ctx, `SELECT has_table_privilege($1, $2, $3),
						$3 IN ('SELECT', 'INSERT', 'UPDATE') AND has_any_column_privilege($1, $2, $3),
						coalesce((SELECT array_agg(a.attname::text ORDER BY a.attnum) FROM pg_attribute a
						          WHERE a.attrelid = $2::regclass AND a.attnum > 0 AND NOT a.attisdropped
						            AND $3 IN ('SELECT', 'INSERT', 'UPDATE') AND has_column_privilege($1, $2, a.attname, $3)), '{}')`,
					role, rel, priv).Scan(&whole, &some, &cols)
				if err != nil {
					t.Fatalf("%s %s %s: %v", role, priv, table, err)
				}
				switch {
				case whole:
					cell += priv[:1]
				case some:
					cell += strings.ToLower(priv[:1])
					fmt.Fprintf(&columns, "%s %s %s: %s\n", role, priv, table, strings.Join(cols, ", "))
				default:
					cell += "-"
					if err := tryDenied(t, pool, role, priv, rel); err != nil {
						t.Error(err)
					}
				}
			}
			matrix.WriteString(" " + cell + " |")
		}
		matrix.WriteString("\n")
	}
	t.Logf("privilege matrix (S I U D T: SELECT INSERT UPDATE DELETE TRUNCATE; lower case: some columns):%s%s", matrix.String(), columns.String())
	if matrix.String() != wantMatrix {
		t.Errorf("privilege matrix:%s\nwant:%s", matrix.String(), wantMatrix)
	}
	if columns.String() != wantColumns {
		t.Errorf("column grants:%s\nwant:%s", columns.String(), wantColumns)
	}
	doc, err := os.ReadFile("../docs/database.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(doc), strings.TrimSpace(wantMatrix)) {
		t.Error("docs/database.md does not show the privilege matrix as it is")
	}
}

// giveBackAttemptFunc is 029_give_back_attempt's function: it runs with the
// owner's rights (it updates attempt_count, which consumer roles may not), so
// only the consumer roles may call it.
const giveBackAttemptFunc = "webhook_ingress.give_back_attempt(bigint, timestamptz, integer, timestamptz)"

// Only the consumer roles may execute give_back_attempt: webhook_worker,
// webhook_consumer, and the per-consumer roles (as its members, those inlet
// roles create-consumer makes included); PUBLIC holds nothing, and every
// other role's call is refused.
func TestGiveBackAttemptExecutableByConsumerRolesOnly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	perConsumer := newConsumerRole(t, pool, "h")
	want := map[string]bool{"webhook_worker": true, "webhook_consumer": true, perConsumer: true}
	for _, role := range append(slices.Clone(matrixRoles), perConsumer) {
		var may bool
		if err := pool.QueryRow(ctx, `SELECT has_function_privilege($1, $2, 'EXECUTE')`, role, giveBackAttemptFunc).Scan(&may); err != nil {
			t.Fatal(err)
		}
		if may != want[role] {
			t.Errorf("%s may execute give_back_attempt: %v, want %v", role, may, want[role])
		}
		err := asRole(t, pool, role, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `SELECT webhook_ingress.give_back_attempt(1, now(), 1, now())`)
			return err
		})
		switch {
		case want[role] && err != nil:
			t.Errorf("%s calls give_back_attempt: %v", role, err)
		case !want[role] && !isPermissionDenied(err):
			t.Errorf("%s calls give_back_attempt: %v, want permission denied (42501)", role, err)
		}
	}
	var public bool
	if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_proc p, aclexplode(p.proacl) a
		WHERE p.oid = $1::regprocedure AND a.grantee = 0)`, giveBackAttemptFunc).Scan(&public); err != nil || public {
		t.Errorf("PUBLIC holds a privilege on give_back_attempt: %v, %v", public, err)
	}
}

// tryDenied runs priv on rel as role, in a transaction rolled back, and
// returns an error unless Postgres refused it for want of privilege.
func tryDenied(t *testing.T, pool interface {
	Begin(context.Context) (pgx.Tx, error)
}, role, priv, rel string) error {
	t.Helper()
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, "SET LOCAL ROLE "+role); err != nil {
		return err
	}
	sql := map[string]string{
		"SELECT":   "SELECT 1 FROM " + rel + " LIMIT 1",
		"INSERT":   "INSERT INTO " + rel + " DEFAULT VALUES",
		"UPDATE":   "UPDATE " + rel + " SET " + firstColumn(rel) + " = " + firstColumn(rel),
		"DELETE":   "DELETE FROM " + rel,
		"TRUNCATE": "TRUNCATE " + rel + " CASCADE",
	}[priv]
	_, err = tx.Exec(ctx, sql)
	if rel == "webhook_ingress.attempts" && priv != "SELECT" {
		// The view is not updatable (a UNION ALL): PostgreSQL refuses a
		// write to it before it looks at privileges, to every role alike.
		if err == nil {
			return fmt.Errorf("%s could %s the view %s with %q", role, priv, rel, sql)
		}
		return nil
	}
	if !isPermissionDenied(err) {
		return fmt.Errorf("%s may not %s %s, but %q gave %v, want permission denied (42501)", role, priv, rel, sql, err)
	}
	return nil
}

// firstColumn is a column of rel every UPDATE can name.
func firstColumn(rel string) string {
	switch rel {
	case "webhook_ingress.subscriptions", "webhook_ingress.jobs", "webhook_ingress.handler_limits":
		return "updated_at"
	case "webhook_ingress.schema_migrations":
		return "name"
	case "webhook_ingress.consumers":
		return "seen_at"
	case "webhook_ingress.consumer_roles", "webhook_ingress.order_lanes":
		return "handler"
	case "webhook_ingress.consumer_role_scopes":
		return "role_name"
	case "webhook_ingress.audit_checkpoints":
		return "created_at"
	case "webhook_ingress.audit_verifications":
		return "verified_at"
	case "webhook_ingress.retention_log":
		return "dropped_by"
	case "webhook_ingress.derived_backfill":
		return "name"
	case "webhook_ingress.filter_version":
		return "version"
	case "webhook_ingress.source_alerts":
		return "source"
	case "webhook_ingress.retention_keys_due":
		return "period_end"
	case "webhook_ingress.reconcile_runs":
		return "source"
	case "webhook_ingress.job_attempts", "webhook_ingress.attempts":
		return "outcome"
	}
	return "provider"
}

// TestIngressCannotChooseReceivedAt: the ingress role stores events through
// InsertEvent and InsertEvents, received_at stamped by the database's clock,
// and cannot set received_at itself, through events or straight into a
// partition (an old one included): a leaked ingress credential cannot
// backdate an event into a period the audit sealer has already sealed or
// will seal as authentic. Before 028_ingress_received_at it could.
func TestIngressCannotChooseReceivedAt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	var oldest string
	if err := pool.QueryRow(ctx, `SELECT events_partition FROM webhook_ingress.partitions() ORDER BY period_start LIMIT 1`).Scan(&oldest); err != nil {
		t.Fatal(err)
	}
	const backdated = `INSERT INTO %s (provider, scheme, external_event_id, event_type, headers, raw_body, signature_verified, received_at)
		VALUES ('stripe', 'stripe', 'evt_backdated', 'invoice.paid', '{}', '\x7b7d', true, %s)`
	for what, sql := range map[string]string{
		"a backdated event":                   fmt.Sprintf(backdated, "webhook_ingress.events", "now() - interval '1 day'"),
		"received_at now()":                   fmt.Sprintf(backdated, "webhook_ingress.events", "now()"),
		"into the default partition":          fmt.Sprintf(backdated, "webhook_ingress.events_default", "'2001-01-01'"),
		"into the oldest partition " + oldest: fmt.Sprintf(backdated, "webhook_ingress."+pgx.Identifier{oldest}.Sanitize(), "now() - interval '1 day'"),
	} {
		err := asRole(t, pool, "webhook_ingress_writer", exec(sql))
		if !isPermissionDenied(err) {
			t.Errorf("webhook_ingress_writer inserting %s: %v, want permission denied (42501)", what, err)
		}
	}

	// What ingress runs still works, and received_at is the insert's own time.
	err := asRole(t, pool, "webhook_ingress_writer", func(tx pgx.Tx) error {
		q := queries.New(tx)
		n, err := q.InsertEvent(ctx, queries.InsertEventParams{Provider: "stripe", Scheme: "stripe", ExternalEventID: "evt_one",
			EventType: "invoice.paid", Headers: []byte(`{}`), RawBody: []byte(`{}`), SignatureVerified: true, RequestUri: "/webhooks/stripe",
			Column10: "", Column11: true})
		if err != nil || n != 1 {
			return fmt.Errorf("InsertEvent: %d rows, %w", n, err)
		}
		stored, err := q.InsertEvents(ctx, queries.InsertEventsParams{Column1: []string{"stripe"}, Column2: []string{"stripe"},
			Column3: []string{"evt_two"}, Column4: []string{"invoice.paid"}, Column5: []string{`{}`}, Column6: [][]byte{[]byte(`{}`)},
			Column7: []bool{true}, Column8: []int16{0}, Column9: []string{"/webhooks/stripe"}, Column10: []string{""},
			Column11: []bool{true}, Column12: []time.Time{time.Now()}})
		if err != nil || len(stored) != 1 {
			return fmt.Errorf("InsertEvents: %v, %w", stored, err)
		}
		if _, err := tx.Exec(ctx, "RESET ROLE"); err != nil {
			return err
		}
		var now int
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM webhook_ingress.events
			WHERE external_event_id IN ('evt_one', 'evt_two') AND received_at = now()`).Scan(&now); err != nil {
			return err
		}
		if now != 2 {
			return fmt.Errorf("%d of the 2 events stored have received_at = the transaction's time", now)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("webhook_ingress_writer storing events as ingress does: %v", err)
	}
}
