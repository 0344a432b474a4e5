package schema_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/schema"
)

// Review helper-165.
//
// Before the fix: 061 says claim_jobs "adds the limited handlers the streamer did not
// name to those it holds back", so a handler's limits hold from the moment a
// consumer registers them, whatever list the caller passes. But v_held is
// p_full_handlers || ARRAY(SELECT … WHERE l.handler <> ALL (p_full_handlers)):
// with p_full_handlers NULL (a caller naming no handler as NULL — pgx encodes a
// nil []string as NULL; the public function and its 4-argument wrapper accept
// it) every "<> ALL (NULL)" is NULL, the limited handlers are left out,
// NULL || '{}' is '{}', cardinality 0, and the claim takes the unrestricted
// branch: it leases a max_in_flight 1 handler's whole backlog. Before 061 the
// same call leased nothing (cardinality(NULL) = 0 is NULL: the "held" branch,
// where "<> ALL (NULL)" matched no handler), so 061 turned a harmless no-op
// into a limits bypass.
//
// Now: the limited handler gets nothing from claim_jobs (it is
// claim_limited_jobs' alone); the unlimited handler's jobs are leased.
func TestClaimJobsNullHeldListHoldsLimitedHandlers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, conn := migratedTo(t, schema.Latest())
	execAll(t, conn,
		`INSERT INTO webhook_ingress.subscriptions (handler) VALUES ('limited'), ('free')`,
		`INSERT INTO webhook_ingress.handler_limits (handler, max_in_flight) VALUES ('limited', 1)`,
		`INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, raw_body, signature_verified)
		 SELECT 'stripe', 'stripe', 'evt_' || g, '{}', true FROM generate_series(1, 3) g`)
	counts := map[string]int{}
	err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SET LOCAL ROLE webhook_streamer`); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT handler, count(*) FROM webhook_ingress.claim_jobs(NULL::text[], 100, 'streamer-1', '1 minute', NULL::interval) GROUP BY handler`)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var h string
			var n int
			if err := rows.Scan(&h, &n); err != nil {
				return err
			}
			counts[h] = n
		}
		return rows.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	if counts["limited"] != 0 {
		t.Errorf("claim_jobs(NULL, …) leased %d jobs of a handler with max_in_flight 1 (want 0: limited handlers are claim_limited_jobs' only, 061)", counts["limited"])
	}
	if counts["free"] != 3 {
		t.Errorf("claim_jobs(NULL, …) leased %d jobs of the unlimited handler, want 3", counts["free"])
	}
}
