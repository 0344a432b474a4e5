package schema_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/internal/pgtest"
	"github.com/inlet-dev/inlet/schema/queries"
)

// TestSurvivor267_LimitedClaimPassesOverAKeyAnUnlimitedClaimIsLeasing: an
// ordered handler's limited claim (claim_limited_jobs) takes 030's per-key
// locks as claim_jobs does (033): a key another claim is leasing, not yet
// committed, is passed over. The window is real since 061 too: a
// claim_handler_jobs that read no limits row for the handler is still
// running when a consumer registers limits for it, and the next claim of the
// handler is then claim_limited_jobs. Without the key lock the limited claim
// leases a late, earlier job of the key beside the uncommitted lease of a
// later one: two jobs of one key run at once.
//
// Mutant: schema/migrations/041_breaker_fixes.up.sql, claim_limited_jobs,
// `WHERE NOT pg_try_advisory_xact_lock(webhook_ingress.order_key_lock(p_handler, …))`
// made `WHERE false AND NOT pg_try_advisory_xact_lock(…)` (the key lock
// neither taken nor respected). Existing tests missed it:
// TestConcurrentClaimsNeverLeaseTwoJobsOfAKey pairs claim_jobs and
// claim_handler_jobs only (its comment leaves the limited claim out since
// 061), and the streamer's ordered tests run limited claims that take turns
// on the handler's limits row.
func TestSurvivor267_LimitedClaimPassesOverAKeyAnUnlimitedClaimIsLeasing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := pool.Exec(ctx, q, args...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	exec(`INSERT INTO webhook_ingress.subscriptions (handler, order_key) VALUES ('o', 'data.object.id')`)
	event := func(id, key string, minute int) {
		t.Helper()
		body := `{"id":"` + id + `","data":{"object":{"id":"` + key + `"}}}`
		exec(`INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, event_type, raw_body, payload, occurred_at, signature_verified)
			VALUES ('stripe', 'stripe', $1, 'customer.updated', convert_to($2, 'UTF8'), $2::jsonb, '2026-01-01'::timestamptz + make_interval(mins => $3), true)`,
			id, body, minute)
	}
	extOf := func(eventID int64) string {
		t.Helper()
		var ext string
		if err := pool.QueryRow(ctx, `SELECT external_event_id FROM webhook_ingress.events WHERE id = $1`, eventID).Scan(&ext); err != nil {
			t.Fatal(err)
		}
		return ext
	}

	event("a2", "k1", 2)
	// A: the ordered handler's claim apart, begun before the handler had
	// limits; not committed yet.
	txA, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = txA.Rollback(ctx) }()
	rowsA, err := queries.New(txA).ClaimHandlerJobs(ctx, queries.ClaimHandlerJobsParams{Handler: "o", LeaseHolder: "A", LeaseFor: time.Minute, BatchSize: 100})
	if err != nil {
		t.Fatal(err)
	}
	if len(rowsA) != 1 || extOf(rowsA[0].EventID) != "a2" {
		t.Fatalf("control: A leased %d jobs, want a2's", len(rowsA))
	}
	// Meanwhile a consumer registers limits for the handler, a late event
	// of key k1 that occurred before a2 arrives, and one of another key.
	exec(`INSERT INTO webhook_ingress.handler_limits (handler, max_in_flight) VALUES ('o', 10)`)
	event("a1", "k1", 1)
	event("b1", "k2", 1)

	// B: the next claim of the handler, a limited one (LockHandlerLimits,
	// then ClaimLimitedJobs, in one transaction).
	txB, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = txB.Rollback(ctx) }()
	qb := queries.New(txB)
	if err := qb.LockHandlerLimits(ctx, "o"); err != nil {
		t.Fatal(err)
	}
	rowsB, err := qb.ClaimLimitedJobs(ctx, queries.ClaimLimitedJobsParams{Handler: "o", LeaseHolder: "B", LeaseFor: time.Minute, BatchSize: 100})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range rowsB {
		got = append(got, extOf(r.EventID))
	}
	slices.Sort(got)
	if err := txB.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := txA.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	var leased int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM webhook_ingress.jobs WHERE order_key = 'k1' AND status = 'leased'`).Scan(&leased); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, []string{"b1"}) || leased != 1 {
		t.Fatalf("the limited claim, while A's lease of a2 was not committed, leased %v (want b1 only: a1's key was being leased by A); %d jobs of key k1 leased at once, want 1",
			got, leased)
	}
}
