package tests

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/internal/testwait"
	"github.com/inlet-dev/inlet/schema/queries"
	"github.com/inlet-dev/inlet/streamer"
)

// TestJobOfARoleDroppedByHandEnds (review helper-211;
// this describes the code before the fix).
//
// Defect: the streamer's routes and the reaper disagree about a consumer
// role dropped by hand (DROP ROLE, which 038's create_consumer_role names as
// a case it handles: its consumer_roles and consumer_role_scopes rows stay).
// ListJobRoutes leaves the role out ("a role dropped ... is left out": its
// members CTE requires EXISTS in pg_roles), so the handler is no longer
// routed and a job only that role covered is published on the handler's own
// topic, where the other role's consumers get it, cannot see it (038's scope
// policy), skip it and let its lease expire. ReapExpiredLeases' `ran` test
// (schema/queries/jobs.sql, "name: ReapExpiredLeases", the NOT EXISTS (...
// consumers o ...) branch) still takes the dropped role's ended consumer
// rows for "a role of its consumers given the handler covers the job" (it
// checks consumer_roles and consumer_role_scopes, not pg_roles), so no live
// consumer "could have received" the reference, every expiry is judged an
// outage and given back uncounted, and the job is leased, published to a
// consumer that cannot take it, and given back again, every lease, for as
// long as the dropped role's consumer rows live (a day: ConsumerAlive's
// cleanup) — while TestJobNoRoleCoversStillEnds documents that a job no
// role covers ends dead-lettered (lease_expired) after its max_attempts.
//
// Here team A (stripe) and team B (github) share "shared"; B's consumer
// stops (its row stays, ended) and the operator drops B by hand. Expected:
// the github jobs (max_attempts 1), which no existing role may take, end
// dead-lettered lease_expired at their first expiry, as routes already
// treat B as gone. Observed: after 10 leases' time they are still open,
// attempt_count 0, leased again and again (attempted_at keeps moving).
//
// Control (run while writing this test): the same test with the role dropped
// through webhook_ingress.drop_consumer_role (which deletes its rows)
// passes in ~1.4 s; only the plain DROP ROLE leaves the jobs circling.
//
// Fixed: ReapExpiredLeases judges a scoped role as ListJobRoutes' members
// do, in both branches: only while it exists in pg_roles and consumer_roles
// gives it the handler. This test failed before the fix (the jobs still
// open after 10 leases) and passes after it.
func TestJobOfARoleDroppedByHandEnds(t *testing.T) {
	rr := newReviewRouting(t)
	ctx := context.Background()
	a := rr.role(t, "a", "stripe")
	// Team B's role is made here, not by rr.role, whose cleanup would call
	// drop_consumer_role on a role this test drops by hand.
	b := fmt.Sprintf("webhook_consumer_rv%d_%d_b", os.Getpid(), sharedRoleSeq.Add(1))
	if _, err := queries.New(rr.p.admin).CreateConsumerRole(ctx, queries.CreateConsumerRoleParams{Role: b,
		Handlers: []string{"shared"}, ScopeProviders: []string{"github"}, ScopeTypes: []string{"*"}}); err != nil {
		t.Fatal(err)
	}
	rr.service(t, "team-a", rr.p.pool(t, a, 8), "team-a", "stripe")
	poolB := rr.p.pool(t, b, 8)
	svcB := rr.service(t, "team-b", poolB, "team-b", "github") // registers shared for github, max_attempts 1
	lease := time.Second
	rr.p.startStreamer(t, streamer.Config{ID: "s1", LeaseDuration: lease, PollInterval: 50 * time.Millisecond,
		ReapInterval: 100 * time.Millisecond})

	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := svcB.Stop(sctx); err != nil {
		t.Fatal(err)
	}
	poolB.Close()
	if _, err := rr.p.admin.Exec(ctx, fmt.Sprintf(`DROP ROLE %q`, b)); err != nil {
		t.Fatal(err)
	}
	// Precondition: the streamer's routes leave the dropped role out (the
	// handler is no longer routed: its jobs go to inlet.jobs.shared).
	routes, err := queries.New(rr.p.admin).ListJobRoutes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range routes {
		if r.Handler == "shared" {
			t.Fatalf("precondition: shared still routed after its role %s was dropped: %+v", b, routes)
		}
	}

	var insertedAt time.Time
	if err := rr.p.admin.QueryRow(ctx, `SELECT now()`).Scan(&insertedAt); err != nil {
		t.Fatal(err)
	}
	rr.insert(t, "dropped", 3, "github")
	deadline := 10 * lease
	testwait.Eventually(t, deadline, fmt.Sprintf("every github job of handler shared, whose only covering role %s was dropped, dead-lettered lease_expired after its 1 attempt (routes publish them on the handler's topic, which only team A reads)", b), func() (bool, string) {
		var ended, open, spent int
		var lastLease *time.Time
		err := rr.p.admin.QueryRow(ctx, `SELECT
				count(*) FILTER (WHERE status = 'dead_letter' AND last_error_class = 'lease_expired'),
				count(*) FILTER (WHERE status NOT IN ('dead_letter', 'completed')),
				max(attempted_at), coalesce(max(attempt_count) FILTER (WHERE status <> 'leased'), 0)
			FROM webhook_ingress.jobs WHERE handler = 'shared' AND provider = 'github'`).Scan(&ended, &open, &lastLease, &spent)
		if err != nil {
			return false, err.Error()
		}
		leased := "never leased"
		if lastLease != nil {
			leased = fmt.Sprintf("last leased %s after insert", lastLease.Sub(insertedAt).Round(time.Millisecond))
		}
		return ended == 3, fmt.Sprintf("%d dead-lettered lease_expired, %d open (%s; max attempt_count of those not leased: %d)", ended, open, leased, spent)
	})
}
