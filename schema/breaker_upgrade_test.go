package schema_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/schema"
	"github.com/inlet-dev/inlet/schema/queries"
)

// A breaker removed while its circuit was open left, on the next probe of
// 033's claim, circuit half_open with next_probe_at NULL; a consumer that
// gave the handler its breaker back before the upgrade left a row with a
// breaker, half open and no next probe. 041 gives such a row a probe due now
// (and its claim treats a missing next probe as due), so the handler gets
// jobs again. (Found by a review of 041's first form, which repaired only
// rows whose breaker was still gone.)
func TestBreakerRestoredBeforeUpgradeProbesAgain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, conn := migratedTo(t, 40)
	// The previous version's UpsertHandlerLimits (before bd36a88), verbatim
	// but for the parameters.
	oldUpsert := func(failures any, interval any) {
		t.Helper()
		if _, err := conn.Exec(ctx, `INSERT INTO webhook_ingress.handler_limits AS l
    (handler, rate_per_second, burst, max_in_flight, breaker_failures, breaker_probe_interval, tokens, updated_at)
VALUES ('h', NULL, NULL, NULL, $1::int4, $2::interval, coalesce(NULL::int4, 0), now())
ON CONFLICT (handler) DO UPDATE
SET rate_per_second        = excluded.rate_per_second,
    burst                  = excluded.burst,
    max_in_flight          = excluded.max_in_flight,
    breaker_failures       = excluded.breaker_failures,
    breaker_probe_interval = excluded.breaker_probe_interval,
    tokens                 = least(l.tokens, coalesce(excluded.burst, 0)),
    updated_at             = now()
WHERE (l.rate_per_second, l.burst, l.max_in_flight, l.breaker_failures, l.breaker_probe_interval)
      IS DISTINCT FROM
      (excluded.rate_per_second, excluded.burst, excluded.max_in_flight, excluded.breaker_failures, excluded.breaker_probe_interval)`,
			failures, interval); err != nil {
			t.Fatal(err)
		}
	}
	claim := func() int {
		t.Helper()
		var n int
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `SET LOCAL ROLE webhook_streamer`); err != nil {
				return err
			}
			// LockHandlerLimits, then ClaimLimitedJobs, in one transaction.
			if err := queries.New(tx).LockHandlerLimits(ctx, "h"); err != nil {
				return err
			}
			return tx.QueryRow(ctx, `SELECT count(*) FROM webhook_ingress.claim_limited_jobs('h', 10, 'streamer-1', '1 minute')`).Scan(&n)
		})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	execAll(t, conn, `INSERT INTO webhook_ingress.subscriptions (handler) VALUES ('h')`)
	oldUpsert(3, "30 seconds")
	// Three failures opened the circuit (HandlerFailed); its probe is due.
	execAll(t, conn, `UPDATE webhook_ingress.handler_limits SET consecutive_failures = 3, circuit = 'open',
		circuit_changed_at = now() - interval '1 minute', next_probe_at = now() - interval '1 second' WHERE handler = 'h'`)
	// The consumer drops the breaker meanwhile (the previous Upsert keeps the circuit).
	oldUpsert(nil, nil)
	execAll(t, conn, `INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, raw_body, signature_verified)
		VALUES ('stripe', 'stripe', 'evt_1', '{}', true)`)
	if n := claim(); n != 1 { // 033's claim: the probe
		t.Fatalf("the previous claim leased %d jobs, want the probe", n)
	}
	// The probe succeeds; nothing counts it (no breaker). Then the breaker
	// comes back (a rollback of the consumer's config), and more work arrives.
	execAll(t, conn,
		`UPDATE webhook_ingress.jobs SET status = 'completed', completed_at = now() WHERE handler = 'h'`)
	oldUpsert(3, "30 seconds")
	execAll(t, conn, `INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, raw_body, signature_verified)
		VALUES ('stripe', 'stripe', 'evt_2', '{}', true)`)
	var circuit string
	var probeNull bool
	if err := conn.QueryRow(ctx, `SELECT circuit, next_probe_at IS NULL FROM webhook_ingress.handler_limits WHERE handler = 'h'`).Scan(&circuit, &probeNull); err != nil {
		t.Fatal(err)
	}
	t.Logf("before the upgrade: circuit %s, next_probe_at NULL: %v", circuit, probeNull)

	if _, err := schema.Migrate(ctx, conn); err != nil {
		t.Fatal(err)
	}
	if err := conn.QueryRow(ctx, `SELECT circuit, next_probe_at IS NULL FROM webhook_ingress.handler_limits WHERE handler = 'h'`).Scan(&circuit, &probeNull); err != nil {
		t.Fatal(err)
	}
	n := claim()
	if n == 0 && circuit != "closed" && probeNull {
		t.Fatalf("after 041: the claim leased nothing and the circuit is %s with no next probe: handler h never gets a job again (no probe, so no outcome to close it)", circuit)
	}
}
