package tests

// A down role's backlog and a shared limited handler (review helper-294,
// fixed in migration 076 before it was released).

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/consumers"
	"github.com/inlet-dev/inlet/internal/testwait"
	"github.com/inlet-dev/inlet/schema"
	"github.com/inlet-dev/inlet/schema/queries"
	"github.com/inlet-dev/inlet/streamer"
)

// TestDownRoleBacklogDoesNotStallLimitedHandler (review helper-294, fixed).
// Defect (in 076's first draft, commit 2be9df6): 076 was meant to let a limited handler shared by scoped roles run
// the live role's jobs while another role is down (its jobs wait, pending).
// With a realistic backlog of the down role (50,000 due jobs, e.g. an
// hour-long outage of that team), the limited claim itself takes tens of
// seconds: claim_limited_jobs evaluates webhook_ingress.job_receivable once
// per due job of the down role ahead of the live role's job, and that SQL
// function is NOT inlined (its body has sub-selects, which PostgreSQL never
// inlines, contrary to 076's header "the planner inlines them"); each call
// runs as a separate SQL-function execution that plans its nested
// role_covers call again for each consumer row (measured ~0.6 ms per job
// with 3 consumer rows, against ~0.01 ms for the same test written inline).
// LimitedWakeIn, in the same pipeline, scans the same jobs with the same
// function. The streamer gives each limited claim 10 s (claimRoundTimeout
// in streamer/apart.go:timed), so every claim of the handler is cancelled:
// the live role's job never runs, for as long as the other role's backlog
// is there; and the handler_limits row is held locked for those 10 s each
// time (the live role's outcomes wait behind it). Root cause:
// schema/migrations/076_claim_receivable_jobs.up.sql job_receivable /
// role_covers (per-row, non-inlined nested SQL functions) as used by
// claim_limited_jobs and schema/queries/limits.sql LimitedWakeIn; the
// reaper (ReapExpiredLeases) pays the same: 1,000 expired leases judged in
// ~610 ms against ~50 ms with HEAD~1's inline predicate.
// Setup: real PostgreSQL, in-process bus, one streamer. Handler "shared"
// (MaxInFlight 2) run by role A (scope stripe, two replicas) and role B
// (scope github); B's consumer stops gracefully. 50,000 github events (B's
// alone) are stored, then one stripe event s1 (A's). A direct
// LockHandlerLimits + ClaimLimitedJobs as webhook_streamer (rolled back) is
// timed, then the streamer starts.
// Expected: the limited claim takes well under the streamer's 10 s claim
// deadline (HEAD~1's claim took 1-27 ms on the same backlog; asserted < 5 s)
// and s1 runs within 90 s of the streamer's start.
// Observed: the direct claim took 86 s when let run (cancelled at its 15 s
// bound in the test as written; 26-37 s with 2 consumer rows, where
// HEAD~1's claim took 1-27 ms); the streamer's claims were cancelled at
// their deadline round after round and s1 was still pending/0 attempts
// 90 s later, never leased (0 github jobs leased either).
// Fixed: 076 judges receivability once per claim (receivable_scopes reads
// the consumers and scopes into arrays) and per job with one inlined
// expression (receives: LIKE ANY over the scopes' joined pairs); the
// reaper keeps its inline predicate (schema
// TestLimitedClaimJudgesReceivableAsTheReaper proves the two agree). The
// claim now takes 60-200 ms over this backlog on this shared machine (the
// scan of the down role's due jobs; 35-80 ms for the scan with a plain
// column filter).
func TestDownRoleBacklogDoesNotStallLimitedHandler(t *testing.T) {
	rr := newReviewRouting(t)
	ctx := context.Background()
	a := rr.role(t, "a", "stripe")
	b := rr.role(t, "b", "github")
	rs := &review291Runs{ran: map[string]int{}}
	limits := func(h *consumers.Handler) { h.MaxInFlight = 2 }
	poolA := rr.p.pool(t, a, 8)
	rs.service(t, rr, "team-a-1", poolA, "stripe", limits)
	rs.service(t, rr, "team-a-2", poolA, "stripe", limits)
	svcB := rs.service(t, rr, "team-b", rr.p.pool(t, b, 8), "github", limits)
	testwait.Eventually(t, 20*time.Second, "both roles alive", func() (bool, string) {
		var roles int
		err := rr.p.admin.QueryRow(ctx, `SELECT count(DISTINCT db_role) FROM webhook_ingress.consumers
			WHERE handler = 'shared' AND db_role IS NOT NULL AND alive_until > now()`).Scan(&roles)
		return err == nil && roles == 2, fmt.Sprintf("%d roles alive (%v)", roles, err)
	})
	// Team B goes down; its backlog builds up.
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := svcB.Stop(sctx); err != nil {
		t.Fatal(err)
	}
	const backlog = 50000
	if _, err := rr.p.admin.Exec(ctx, `INSERT INTO webhook_ingress.events
		(provider, scheme, external_event_id, event_type, raw_body, signature_verified)
		SELECT 'github', 'stripe', 'evt_g' || g, 'x', '{}', true FROM generate_series(1, $1::int) g`, backlog); err != nil {
		t.Fatal(err)
	}
	if _, err := rr.p.admin.Exec(ctx, `INSERT INTO webhook_ingress.events
		(provider, scheme, external_event_id, event_type, raw_body, signature_verified)
		VALUES ('stripe', 'stripe', 'evt_s1', 'x', '{}', true)`); err != nil {
		t.Fatal(err)
	}
	if _, err := rr.p.admin.Exec(ctx, `ANALYZE webhook_ingress.jobs`); err != nil {
		t.Fatal(err)
	}
	var due int
	if err := rr.p.admin.QueryRow(ctx, `SELECT count(*) FROM webhook_ingress.jobs
		WHERE handler = 'shared' AND status = 'pending' AND next_attempt_at <= now()`).Scan(&due); err != nil || due != backlog+1 {
		t.Fatalf("%d jobs of shared due (%v), want %d", due, err, backlog+1)
	}

	// One limited claim as the streamer makes it, timed, then rolled back.
	sp := rr.p.pool(t, schema.StreamerRole, 1)
	// Bounded at 15 s (the streamer gives it 10 s).
	cctx, ccancel := context.WithTimeout(ctx, 15*time.Second)
	tx, err := sp.Begin(cctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := queries.New(tx).LockHandlerLimits(cctx, "shared"); err != nil {
		t.Fatal(err)
	}
	started := time.Now()
	claimed, err := queries.New(tx).ClaimLimitedJobs(cctx, queries.ClaimLimitedJobsParams{Handler: "shared", BatchSize: 32,
		LeaseHolder: "probe", LeaseFor: time.Minute})
	took := time.Since(started)
	_ = tx.Rollback(ctx)
	ccancel()
	if err != nil && cctx.Err() == nil {
		t.Fatal(err)
	}
	leasedS1 := 0
	for _, j := range claimed {
		if j.Provider == "stripe" {
			leasedS1++
		}
	}
	t.Logf("limited claim with %d down-role jobs ahead: %v (%v), %d leased (%d of them s1)", backlog, took, err, len(claimed), leasedS1)
	if took > 5*time.Second || err != nil {
		t.Errorf("one limited claim of shared with %d due jobs of the down role ahead of s1 took %v (%v; %d leased); "+
			"want well under the streamer's 10 s claim deadline (HEAD~1's claim: milliseconds)", backlog, took, err, len(claimed))
	}

	rr.p.startStreamer(t, streamer.Config{ID: "s1", LeaseDuration: 5 * time.Second, PollInterval: 50 * time.Millisecond,
		ReapInterval: 100 * time.Millisecond})
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) && rs.count("evt_s1") == 0 {
		time.Sleep(200 * time.Millisecond)
	}
	if rs.count("evt_s1") == 0 {
		var s1Status string
		var s1Attempts, gLeased int
		if err := rr.p.admin.QueryRow(ctx, `SELECT
				(SELECT j.status::text || '/' || j.attempt_count FROM webhook_ingress.jobs j JOIN webhook_ingress.events e ON e.id = j.event_id
				 WHERE j.handler = 'shared' AND e.external_event_id = 'evt_s1'),
				(SELECT count(*) FROM webhook_ingress.job_attempts x JOIN webhook_ingress.jobs j ON j.id = x.job_id
				 WHERE j.handler = 'shared' AND j.provider = 'stripe'),
				(SELECT count(*) FROM webhook_ingress.jobs WHERE handler = 'shared' AND provider = 'github' AND attempted_at IS NOT NULL)`).
			Scan(&s1Status, &s1Attempts, &gLeased); err != nil {
			t.Fatal(err)
		}
		t.Fatalf("90 s after the streamer started, team A's job s1 never ran (status/attempts %s, %d attempt rows; "+
			"github jobs ever leased %d): with %d due jobs of the down role B ahead of it, each limited claim "+
			"(timed directly: %v) outlives the streamer's 10 s claim deadline and is cancelled; runs %s",
			s1Status, s1Attempts, gLeased, backlog, took, rs.String())
	}
}
