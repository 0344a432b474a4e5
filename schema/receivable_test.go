package schema_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/inlet-dev/inlet/internal/pgtest"
)

// TestLimitedClaimJudgesReceivableAsTheReaper: claim_limited_jobs (076)
// leases only jobs a live consumer could receive, judged once per claim
// (receivable_scopes) and per job by one inlined expression (receives);
// the reaper (ReapExpiredLeases) judges the same "could a consumer have
// received it" with sub-selects per expired lease. The two must agree, or a
// job the claim passes over is one the reaper would count (or the other way
// round): for every mix of consumers (none, or alive, or gone, of a version
// before 064 (db_role NULL), of an unrestricted role (db_role empty), of two scoped
// roles given the handler, of a scoped role not given it) and jobs whose
// source or type hold U+001F (the joined pairs' separator, judged side by
// side instead), receives equals the reaper's predicate asked of the
// consumers alive now, or true when no consumer of the handler is known.
func TestLimitedClaimJudgesReceivableAsTheReaper(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	roleA := newScopedConsumerRole(t, pool, [][2]string{{"stripe", "*"}}, "h")
	roleB := newScopedConsumerRole(t, pool, [][2]string{{"git*", "push*"}, {"shop_fy", "orders/*"}}, "h")
	roleC := newScopedConsumerRole(t, pool, [][2]string{{"*", "*"}}, "other") // not given h
	kinds := []*string{nil, ptr(""), &roleA, &roleB, &roleC}
	providers := []string{"stripe", "github", "github", "shop_fy", "shopify", "git\x1fhub", "github", "stripe\x1f"}
	types := []string{"charge.x", "push", "issues", "orders/create", "orders/create", "push", "pu\x1fsh", "x"}

	const reference = `SELECT NOT EXISTS (SELECT FROM webhook_ingress.consumers WHERE handler = 'h') OR EXISTS (
		SELECT 1 FROM webhook_ingress.consumers c
		WHERE c.handler = 'h' AND c.alive_until > now()
		  AND (c.db_role IS NULL OR c.db_role = ''
		       OR (EXISTS (SELECT FROM webhook_ingress.consumer_roles r WHERE r.handler = 'h' AND r.role_name = c.db_role)
		           AND EXISTS (SELECT FROM pg_catalog.pg_roles a WHERE a.rolname = c.db_role)
		           AND EXISTS (SELECT FROM webhook_ingress.consumer_role_scopes s
		                       WHERE s.role_name = c.db_role AND x.p LIKE s.provider_like AND x.e LIKE s.event_type_like))
		       OR NOT EXISTS (SELECT FROM webhook_ingress.consumers o
		                      WHERE o.handler = 'h'
		                        AND (o.db_role = ''
		                             OR (EXISTS (SELECT FROM webhook_ingress.consumer_roles r WHERE r.handler = 'h' AND r.role_name = o.db_role)
		                                 AND EXISTS (SELECT FROM pg_catalog.pg_roles a WHERE a.rolname = o.db_role)
		                                 AND EXISTS (SELECT FROM webhook_ingress.consumer_role_scopes s
		                                             WHERE s.role_name = o.db_role
		                                               AND x.p LIKE s.provider_like AND x.e LIKE s.event_type_like))))))`
	q := `SELECT x.p, x.e, (` + reference + `) AS want,
			webhook_ingress.receives(x.p, x.e, r.open, r.uncovered, r.live_pairs, r.member_pairs, r.live_scopes, r.member_scopes) AS got
		FROM unnest($1::text[], $2::text[]) AS x(p, e), webhook_ingress.receivable_scopes('h') r`

	// Each kind of consumer absent (0), alive (1) or gone (2): 3^5 mixes.
	mixes, receivable, passed := 0, 0, 0
	for n := 0; n < 243; n++ {
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var mix string
		for i, k, m := 0, 0, n; i < len(kinds); i, m = i+1, m/3 {
			state := m % 3
			if state == 0 {
				continue
			}
			k++
			alive := "now() + interval '1 hour'"
			if state == 2 {
				alive = "now() - interval '1 minute'"
			}
			if _, err := tx.Exec(ctx, fmt.Sprintf(`INSERT INTO webhook_ingress.consumers (handler, worker_id, seen_at, alive_until, db_role)
				VALUES ('h', $1, now(), %s, $2)`, alive), fmt.Sprint("w", k), kinds[i]); err != nil {
				t.Fatal(err)
			}
			mix += fmt.Sprintf(" %s:%s", label(kinds[i], roleA, roleB, roleC), []string{"", "alive", "gone"}[state])
		}
		rows, err := tx.Query(ctx, q, providers, types)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var p, e string
			var want, got bool
			if err := rows.Scan(&p, &e, &want, &got); err != nil {
				t.Fatal(err)
			}
			if want != got {
				t.Errorf("consumers [%s]: job (%q, %q): the claim judges receivable %v, the reaper's test %v", mix, p, e, got, want)
			}
			if got {
				receivable++
			} else {
				passed++
			}
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		_ = tx.Rollback(ctx)
		mixes++
	}
	// Both answers occur (a test of one answer only proves nothing).
	if receivable == 0 || passed == 0 {
		t.Fatalf("%d mixes: %d judgements receivable, %d not; want both", mixes, receivable, passed)
	}
}

func ptr(s string) *string { return &s }

func label(k *string, a, b, c string) string {
	switch {
	case k == nil:
		return "pre-064"
	case *k == "":
		return "unrestricted"
	case *k == a:
		return "A(stripe)"
	case *k == b:
		return "B(git*/push*, shop_fy/orders/*)"
	case *k == c:
		return "C(not given h)"
	}
	return *k
}
