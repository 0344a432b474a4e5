package schema_test

import (
	"context"
	"testing"

	"github.com/inlet-dev/inlet/internal/pgtest"
)

// TestSurvivor308_PairSeparatorKeepsSourceAndTypeApart (mutation run,
// helper-308).
// Guarantee (076): receives matches a job against a scope as its source
// against the scope's source pattern AND its type against the type
// pattern; receivable_scopes joins each scope's two LIKE patterns with
// U+001F, and receives joins the job's source and type with the same
// U+001F, so that a pattern half can only match its own side.
// Mutant that no existing behaviour test caught (schema/migrations/
// 076_claim_receivable_jobs.up.sql:70-71 and :113-114, and again in the
// latest definition, 077_receivable_jobs_again.up.sql:90-91 and :133-134):
// the pairs joined without chr(31) (s.p || s.e, p_provider ||
// p_event_type). (TestCommittedMigrationsAreUnchanged refuses any edit of
// a committed migration's text; it pins the text, not the behaviour.) Then scope
// (git*, push*) = 'git%push%' covers the job (gitpush, x), whose type is not
// push*: the job is taken to be covered by a role whose consumers are gone,
// and a claim passes it over although it goes to the handler's own topic,
// which the live consumer reads.
// Why missed: TestLimitedClaimJudgesReceivableAsTheReaper compares receives
// with the reaper's test for sources and types that never straddle the
// seam (no source ends in a scope's type prefix), and the U+001F jobs it has
// go to scopes_cover, not to the joined pairs.
func TestSurvivor308_PairSeparatorKeepsSourceAndTypeApart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	live := newScopedConsumerRole(t, pool, [][2]string{{"stripe", "*"}}, "h")
	gone := newScopedConsumerRole(t, pool, [][2]string{{"git*", "push*"}}, "h")
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `INSERT INTO webhook_ingress.consumers (handler, worker_id, seen_at, alive_until, db_role)
		VALUES ('h', 'w-live', now(), now() + interval '1 hour', $1),
		       ('h', 'w-gone', now() - interval '1 minute', now() - interval '1 minute', $2)`, live, gone); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		p, e string
		want bool
	}{
		// No role covers it (its type is not push*): the handler's own
		// topic, read by the live consumer.
		{"gitpush", "x", true},
		{"git", "hubpushx", true},
		// Only the gone role covers it: nobody alive receives it.
		{"github", "push", false},
		// The live role covers it.
		{"stripe", "charge.succeeded", true},
	} {
		var got bool
		if err := tx.QueryRow(ctx, `SELECT webhook_ingress.receives($1, $2, r.open, r.uncovered, r.live_pairs, r.member_pairs, r.live_scopes, r.member_scopes)
			FROM webhook_ingress.receivable_scopes('h') r`, c.p, c.e).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != c.want {
			t.Errorf("job (%q, %q) with a live stripe/* role and a gone git*/push* role: receives %v, want %v", c.p, c.e, got, c.want)
		}
	}
}
