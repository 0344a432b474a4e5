package schema_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"testing"

	"github.com/inlet-dev/inlet/internal/pgtest"
	"github.com/inlet-dev/inlet/schema/queries"
)

// TestSurvivor298_LimitedClaimLeasesOnlyJobsALiveConsumerCanReceive
// (mutation run, helper-298).
// Guarantee (076): claim_limited_jobs leases a shared handler's due job
// only when job_receivable says a consumer alive now could receive it: a
// live consumer of an unrestricted role, or of a role that is still one of
// the handler's (consumer_roles, and the role exists in pg_roles) with a
// scope covering the job's source AND type; or any live consumer when no
// role of the handler's consumers covers the job at all (it goes to the
// handler's own topic). A handler no consumer of which is known is claimed
// as before 076.
// Mutants that no existing test caught (schema/migrations/
// 076_claim_receivable_jobs.up.sql):
//   - role_covers without "AND p_event_type LIKE s.event_type_like": a live
//     role of the handler scoped to another type of the job's source was
//     taken to receive it, and the stopped role's job was leased;
//   - claim_limited_jobs asking job_receivable(p_handler, …, now() -
//     interval '1 day', '-infinity') (consumers seen in the last day, not
//     alive now): the job of a role whose consumer stopped was leased;
//   - v_open with "c.seen_at > now() - interval '1 day'" for
//     "c.alive_until > now()": a recently seen stopped consumer of an
//     unrestricted (or pre-064) role opened every job of the handler.
//
// Also caught here: role_covers without the provider LIKE (not run
// against the suite) or without the pg_roles check, job_receivable's NOT
// EXISTS (no role covers the job) branch made false, v_open without "no
// consumer of the handler known at all" (these three caught by existing
// tests too).
//
// Why missed: the schema and streamer tests of the limited claim have no
// scoped roles, and the end-to-end tests of 076
// (tests/shared_limited_roles_test.go) stop a role's consumers of another
// source with no unrestricted or pre-064 consumer beside them, which these
// mutants keep passing. Here claim_limited_jobs is called directly, with a
// live role of the same source but another type and
// a recently seen, stopped pre-064 consumer.
func TestSurvivor298_LimitedClaimLeasesOnlyJobsALiveConsumerCanReceive(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := pool.Exec(ctx, q, args...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	exec(`INSERT INTO webhook_ingress.subscriptions (handler) VALUES ('h'), ('nobody')`)
	exec(`INSERT INTO webhook_ingress.handler_limits (handler, max_in_flight) VALUES ('h', 100), ('nobody', 100)`)

	invoices := newScopedConsumerRole(t, pool, [][2]string{{"stripe", "invoice.*"}}, "h") // its consumer stopped
	charges := newScopedConsumerRole(t, pool, [][2]string{{"stripe", "charge.*"}}, "h")   // alive: another type
	paddle := newScopedConsumerRole(t, pool, [][2]string{{"paddle", "invoice.*"}}, "h")   // alive: another source
	dropped := fmt.Sprintf("webhook_consumer_s298_%d_%d", os.Getpid(), roleSeq.Add(1))    // alive, but dropped by hand
	if _, err := queries.New(pool).CreateConsumerRole(ctx, queries.CreateConsumerRoleParams{Role: dropped, Handlers: []string{"h"},
		ScopeProviders: []string{"stripe"}, ScopeTypes: []string{"invoice.*"}}); err != nil {
		t.Fatal(err)
	}
	exec(`DROP ROLE ` + dropped)
	exec(`INSERT INTO webhook_ingress.consumers (handler, worker_id, seen_at, alive_until, db_role) VALUES
		('h', 'invoices-1', now(), now() - interval '1 second', $1),
		('h', 'charges-1', now(), now() + interval '1 hour', $2),
		('h', 'paddle-1', now(), now() + interval '1 hour', $3),
		('h', 'dropped-1', now(), now() + interval '1 hour', $4),
		('h', 'old-1', now(), now() - interval '1 second', NULL)`, invoices, charges, paddle, dropped)
	exec(`INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, event_type, raw_body, signature_verified) VALUES
		('stripe', 'stripe', 'evt_inv', 'invoice.paid', 'x', true),
		('stripe', 'stripe', 'evt_chg', 'charge.refunded', 'x', true),
		('shopify', 'shopify', 'evt_ord', 'orders/create', 'x', true)`)

	claim := func(h string) []string {
		t.Helper()
		rows, err := pool.Query(ctx, `SELECT provider || ':' || event_type FROM webhook_ingress.claim_limited_jobs($1, 100, 's298', interval '1 minute')`, h)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for rows.Next() {
			var s string
			if err := rows.Scan(&s); err != nil {
				t.Fatal(err)
			}
			got = append(got, s)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		slices.Sort(got)
		return got
	}
	if got, want := claim("h"), []string{"shopify:orders/create", "stripe:charge.refunded"}; !slices.Equal(got, want) {
		t.Errorf("claim_limited_jobs(h) leased %v, want %v: only jobs a consumer alive now could receive (not the invoice, whose role's consumer stopped)", got, want)
	}
	if got := claim("nobody"); len(got) != 3 {
		t.Errorf("claim_limited_jobs(nobody) leased %v; want all 3 due jobs: no consumer of the handler is known, so it is claimed as before 076", got)
	}
}
