package tests

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/consumers"
	"github.com/inlet-dev/inlet/schema"
	"github.com/inlet-dev/inlet/streamer"
)

// TestVerySlowRoleBacklogDoesNotHoldFastRoleBehindIt (review helper-180,
// fixed; this describes the code before the fix).
//
// Defect: docs/pipeline.md (step 2, pacing) promises for a handler shared by
// consumer roles that "a slow role's backlog ahead in due order does not
// hold back the other roles' jobs behind it". It does, once the slow role
// is slow enough that the HANDLER's pace is near the floor. This is
// TestSlowRoleBacklogDoesNotHoldFastRoleBehindIt (tests/sharedrouting_pace_test.go)
// with one change: team A takes 500 ms a job (2 jobs/s) instead of 50 ms.
//
// The per-role pacing of cfb3df3 (Streamer.paceRoutes) comes on top of the
// per-handler pacing, which still holds the shared handler as a whole: its
// unextended leases (inFlight.unext[h], all topics together) against capOf(h)
// at the handler's pace (streamer/inflight.go full() and the apart room in
// atLimit, capOf). Only team A's jobs end (the platform gets none), so the
// handler's pace is team A's 2/s, its room the floor (4), and team A's
// references waiting for its one slot fill it: the handler is "full" and
// not claimed, or claimed with a batch of its few free places. Each such
// claim takes the first jobs in due order - team A's stripe backlog - which
// fit team A's topic room (the same floor), so paceRoutes defers nothing
// (Stats().Deferred stays 0) and the claims never walk past the backlog.
// The platform's consumer (instant, idle) starts no job for as long as
// team A's backlog lasts: 300 jobs x 0.5 s = 150 s here; hours for a larger
// backlog.
//
// Expected: the github jobs behind the backlog are run by the idle platform
// consumer within seconds (all 2,000 within 30 s), while team A works.
// Observed: none of them in 30 s; 0 leases deferred.
//
// Fixed: a handler in the route table is held to max_leased_per_handler
// only (inFlight.capOf, floorRoom): each role's topic is paced by
// paceRoutes, whose deferrals let the claims walk past the backlog.
func TestVerySlowRoleBacklogDoesNotHoldFastRoleBehindIt(t *testing.T) {
	rr := newReviewRouting(t)
	a := rr.role(t, "a", "stripe")
	var aRan, platformRan atomic.Int64
	review173Service(t, rr, rr.p.pool(t, a, 8), "team-a", []string{"stripe"}, 2, 1, func(context.Context, *consumers.Event) error {
		aRan.Add(1)
		time.Sleep(500 * time.Millisecond) // slow but healthy: 2 jobs/s
		return nil
	})
	review173Service(t, rr, rr.p.pool(t, schema.WorkerRole, 8), "platform", []string{"stripe", "github"}, 2, 16, func(context.Context, *consumers.Event) error {
		platformRan.Add(1)
		return nil
	})
	ctx := context.Background()
	for _, q := range []string{
		`INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, event_type, raw_body, signature_verified)
		 SELECT 'stripe', 'stripe', 'evt_slow_' || g, 'x', '{}', true FROM generate_series(1, 300) g`,
		`INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, event_type, raw_body, signature_verified)
		 SELECT 'github', 'stripe', 'evt_fast_' || g, 'x', '{}', true FROM generate_series(1, 2000) g`,
	} {
		if _, err := rr.p.admin.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	st := rr.p.startStreamer(t, streamer.Config{ID: "s1", LeaseDuration: 4 * time.Second, PollInterval: 50 * time.Millisecond,
		ReapInterval: 100 * time.Millisecond})

	deadline := time.Now().Add(30 * time.Second)
	var ghOpen, stripeOpen int
	for {
		if err := rr.p.admin.QueryRow(ctx, `SELECT count(*) FILTER (WHERE provider = 'github'), count(*) FILTER (WHERE provider = 'stripe')
			FROM webhook_ingress.jobs WHERE handler = 'shared' AND status NOT IN ('completed', 'dead_letter')`).Scan(&ghOpen, &stripeOpen); err != nil {
			t.Fatal(err)
		}
		if ghOpen == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	var dead, expired int
	if err := rr.p.admin.QueryRow(ctx, `SELECT (SELECT count(*) FROM webhook_ingress.jobs WHERE handler = 'shared' AND status = 'dead_letter'),
		(SELECT count(*) FROM webhook_ingress.job_attempts a JOIN webhook_ingress.jobs j ON j.id = a.job_id WHERE j.handler = 'shared' AND a.outcome = 'lease_expired')`).Scan(&dead, &expired); err != nil {
		t.Fatal(err)
	}
	t.Logf("dead-lettered %d, lease_expired attempts %d", dead, expired)
	stats := st.Stats()
	t.Logf("team A started %d, platform %d; %d github and %d stripe jobs open; streamer leased %d, deferred %d, published %d",
		aRan.Load(), platformRan.Load(), ghOpen, stripeOpen, stats.Claimed, stats.Deferred, stats.Published)
	if ghOpen > 0 {
		t.Errorf("30 s after start, %d of 2,000 github jobs still open (the platform's idle consumer started %d): "+
			"team A's slow stripe backlog ahead in due order holds them back (%d stripe jobs open, %d leases deferred)",
			ghOpen, platformRan.Load(), stripeOpen, stats.Deferred)
	}
}
