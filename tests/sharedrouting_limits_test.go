package tests

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inlet-dev/inlet/consumers"
	"github.com/inlet-dev/inlet/schema"
	"github.com/inlet-dev/inlet/streamer"
)

// review185Service starts a consumer service of handler "shared" (patterns
// provider/*) on pool running fn, with the handler's limits set as in lim
// (RateLimit, Burst, MaxInFlight, Breaker*, MaxAttempts (default 5); the
// rest is filled here).
func review185Service(t *testing.T, rr *reviewRouting, pool *pgxpool.Pool, workerID string, providers []string, concurrency int,
	lim consumers.Handler, fn func(context.Context, *consumers.Event) error) *consumers.Service {
	t.Helper()
	var patterns []consumers.Pattern
	for _, pr := range providers {
		patterns = append(patterns, consumers.Pattern{Provider: pr, EventType: "*"})
	}
	h := lim
	h.Name, h.Patterns, h.Concurrency, h.Func = "shared", patterns, concurrency, fn
	if h.MaxAttempts == 0 {
		h.MaxAttempts = 5
	}
	svc, err := consumers.New(consumers.Config{
		Pool: pool, Subscriber: rr.p.bus, WorkerID: workerID, Logger: rr.p.quiet,
		AliveInterval: 200 * time.Millisecond, LeaseExtend: time.Second,
		Handlers: []consumers.Handler{h},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		_ = svc.Stop(sctx)
	})
	return svc
}

// TestRateLimitedSharedHandlerSpendsTokensOnDeferredLeases (review
// helper-185, fixed: DeferJobs gives the tokens of the leases it defers
// back; this describes the code before the fix).
//
// Defect: a handler shared by consumer roles AND rate-limited
// (handler_limits rate_per_second/burst) is claimed by claim_limited_jobs,
// which takes one token of the bucket for every job it leases
// (041_breaker_fixes.up.sql, the `spent` CTE: tokens = v_tokens -
// count(leased)). The per-role pacing then gives most of those leases back
// unpublished (Streamer.paceRoutes -> DeferJobs, streamer/streamer.go
// publishBatch/paceRoutes) when they belong to a slow role: the job never
// starts, but its token is gone (DeferJobs, schema/queries/jobs.sql, does
// not touch handler_limits). Claims take jobs in due order, so a slow
// role's backlog ahead is walked at the rate limit, one token per deferred
// lease, before any other role's job behind it is reached: the rate limit
// is spent on jobs that do not run, and the idle fast role gets nothing.
// This is review helper-180's symptom ("a slow role's backlog ahead in due
// order holds back the other roles' jobs behind it", which docs/pipeline.md
// says does not happen) coming back through the rate limit.
//
// Setup: rate 20/s (burst 20); team A (stripe, 1 at a time, 500 ms a job =
// 2/s) with 1,000 stripe jobs first in due order; the platform
// (webhook_worker, instant) with 400 github jobs behind them.
//
// Expected: in 20 s the bucket lets ~420 jobs start; team A can start ~40
// of them, so the platform should have run most of its 400 github jobs
// (at least 200 is asserted). Observed: none (every token went to stripe
// leases deferred unrun; ~1,000 tokens are needed before the first github
// job is reached, 50 s at 20/s, and more when deferred stripe jobs come due
// again) — the handler runs at a small fraction of its configured rate.
func TestRateLimitedSharedHandlerSpendsTokensOnDeferredLeases(t *testing.T) {
	rr := newReviewRouting(t)
	a := rr.role(t, "a", "stripe")
	lim := consumers.Handler{RateLimit: 20, Burst: 20}
	var aRan, platformRan atomic.Int64
	review185Service(t, rr, rr.p.pool(t, a, 8), "team-a", []string{"stripe"}, 1, lim, func(context.Context, *consumers.Event) error {
		aRan.Add(1)
		time.Sleep(500 * time.Millisecond) // slow but healthy: 2 jobs/s
		return nil
	})
	review185Service(t, rr, rr.p.pool(t, schema.WorkerRole, 8), "platform", []string{"stripe", "github"}, 16, lim, func(context.Context, *consumers.Event) error {
		platformRan.Add(1)
		return nil
	})
	ctx := context.Background()
	for _, q := range []string{
		`INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, event_type, raw_body, signature_verified)
		 SELECT 'stripe', 'stripe', 'evt_rl_slow_' || g, 'x', '{}', true FROM generate_series(1, 1000) g`,
		`INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, event_type, raw_body, signature_verified)
		 SELECT 'github', 'stripe', 'evt_rl_fast_' || g, 'x', '{}', true FROM generate_series(1, 400) g`,
	} {
		if _, err := rr.p.admin.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	var rate float64
	if err := rr.p.admin.QueryRow(ctx, `SELECT rate_per_second FROM webhook_ingress.handler_limits WHERE handler = 'shared'`).Scan(&rate); err != nil {
		t.Fatalf("the shared handler has no rate limit: %v", err)
	}
	st := rr.p.startStreamer(t, streamer.Config{ID: "s1", LeaseDuration: 4 * time.Second, PollInterval: 50 * time.Millisecond,
		ReapInterval: 100 * time.Millisecond})

	time.Sleep(20 * time.Second)
	var ghDone, stripeDone int
	if err := rr.p.admin.QueryRow(ctx, `SELECT count(*) FILTER (WHERE provider = 'github'), count(*) FILTER (WHERE provider = 'stripe')
		FROM webhook_ingress.jobs WHERE handler = 'shared' AND status = 'completed'`).Scan(&ghDone, &stripeDone); err != nil {
		t.Fatal(err)
	}
	stats := st.Stats()
	t.Logf("in 20 s at %.0f/s: %d github and %d stripe jobs completed (team A ran %d, platform %d); streamer leased %d, deferred %d, published %d",
		rate, ghDone, stripeDone, aRan.Load(), platformRan.Load(), stats.Claimed, stats.Deferred, stats.Published)
	if ghDone < 200 {
		t.Errorf("20 s at a rate limit of %.0f/s (~420 tokens): only %d of 400 github jobs ran on the idle platform consumer, "+
			"and %d stripe jobs on team A; the streamer leased %d jobs (a token each) and deferred %d of them unrun: "+
			"the rate limit was spent on leases of the slow role's backlog given back unpublished",
			rate, ghDone, stripeDone, stats.Claimed, stats.Deferred)
	}
}

// TestRateLimitedSlowRoleBurnsAttempts (review helper-185, fixed by the
// pace read over windows of several ends and the floor's room for a
// limited or ordered handler not read yet; this describes the code before
// the fix).
//
// Defect: a healthy slow role of a rate-limited handler shared by consumer
// roles has its jobs' leases expire and counted as attempts, and
// dead-lettered unrun: the defect of review helper-173 ("a slow role's
// backlog leased at the fast role's pace, dead-lettered unrun"), which
// cfb3df3 fixed for handlers the main claim leases, is back when the shared
// handler has limits (handler_limits: claimed apart by claimLimited, a few
// jobs per claim, each claim's references one small message).
//
// Team A (stripe, 1 at a time, 500 ms a job = 2/s) has 300 stripe jobs of
// "shared" (rate 20/s), max_attempts 2; the platform (webhook_worker) shares
// the handler. Nothing crashes, nobody stops. Observed (20 s): ~19
// unextended references wait on team A's topic at all times where half a
// lease at its pace is 4; ~45 leases expire (each a counted attempt, team A
// being alive), and jobs are dead-lettered lease_expired although team A's
// handler never ran them.
//
// Root cause: the topic's pace (inFlight.topicRoom from handlerPace.note,
// streamer/inflight.go) reads a 2/s role at 10/s (one end in a 100 ms
// window = 10/s, taken up at once, down over 10 s), so topicRoom allows 20
// unextended references (~10 s of its work) under a 4 s lease; in the
// main claim's big messages the consumer extends the references of the
// message it took (so the over-reading hid there), but the rate-limited
// claims publish one or two references per message and the consumer
// acknowledges (and extends) one message per free slot, so the rest wait
// unextended and expire. See streamer/pace_slowrole_test.go.
//
// Expected: no lease of a healthy consumer's job expires (at most a few on
// a machine starving the test of CPU: maxStarvedExpiries); none is
// dead-lettered. That a starved consumer's waiting references can
// still expire is a known limit: the pace is read from the ends of recent
// attempts, and a consumer slowed after the reading has half a lease of
// margin (docs/pipeline.md).
func TestRateLimitedSlowRoleBurnsAttempts(t *testing.T) {
	const maxStarvedExpiries = 12
	rr := newReviewRouting(t)
	a := rr.role(t, "a", "stripe")
	lim := consumers.Handler{RateLimit: 20, Burst: 20, MaxAttempts: 2}
	var mu sync.Mutex
	ran := map[int64]int{}
	review185Service(t, rr, rr.p.pool(t, a, 8), "team-a", []string{"stripe"}, 1, lim, func(_ context.Context, e *consumers.Event) error {
		mu.Lock()
		ran[e.JobID]++
		mu.Unlock()
		time.Sleep(500 * time.Millisecond) // slow but healthy: 2 jobs/s
		return nil
	})
	review185Service(t, rr, rr.p.pool(t, schema.WorkerRole, 8), "platform", []string{"stripe", "github"}, 16, lim, func(context.Context, *consumers.Event) error {
		return nil
	})
	ctx := context.Background()
	if _, err := rr.p.admin.Exec(ctx, `INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, event_type, raw_body, signature_verified)
		 SELECT 'stripe', 'stripe', 'evt_rl_burn_' || g, 'x', '{}', true FROM generate_series(1, 300) g`); err != nil {
		t.Fatal(err)
	}
	// An 8 s lease: half a lease at team A's pace (8 references, 4 s of
	// its work) is the slack a waiting reference has, less the references
	// of the message team A holds extended ahead of it. With a 4 s lease
	// (2 s of slack), a CI run starving the test's process of CPU made team
	// A start its jobs late enough for a few to expire (22 in one run under
	// 12 busy loops, 0 without); the defect this test describes gave ~10 s
	// of work where 4 s fit, and still expires within 20 s at 8 s.
	st := rr.p.startStreamer(t, streamer.Config{ID: "s1", LeaseDuration: 8 * time.Second, PollInterval: 50 * time.Millisecond,
		ReapInterval: 100 * time.Millisecond})
	time.Sleep(20 * time.Second)

	var unext, expired int
	if err := rr.p.admin.QueryRow(ctx, `SELECT count(*) FILTER (WHERE status = 'leased' AND worker_id IS NULL),
		(SELECT count(*) FROM webhook_ingress.job_attempts WHERE outcome = 'lease_expired')
		FROM webhook_ingress.jobs WHERE handler = 'shared'`).Scan(&unext, &expired); err != nil {
		t.Fatal(err)
	}
	rows, err := rr.p.admin.Query(ctx, `SELECT id FROM webhook_ingress.jobs WHERE handler = 'shared' AND status = 'dead_letter'`)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		t.Fatal(err)
	}
	neverRan := 0
	mu.Lock()
	for _, id := range ids {
		if ran[id] == 0 {
			neverRan++
		}
	}
	started := len(ran)
	mu.Unlock()
	s := st.Stats()
	t.Logf("20 s: team A started %d jobs; %d unextended leases now; %d lease_expired attempts; %d dead letters (%d never run); "+
		"streamer leased %d, deferred %d, published %d, reaped %d", started, unext, expired, len(ids), neverRan,
		s.Claimed, s.Deferred, s.Published, s.Reaped)
	// A few expiries are the machine's: a CI run starving the test's
	// process of CPU slows team A below the pace the streamer read (7 seen
	// at 8 s, with 7 unextended references, 2026-12-07; none alone). The
	// defect gave tens per lease and dead letters never run.
	if expired > maxStarvedExpiries || len(ids) > 0 {
		t.Errorf("a healthy slow role of a rate-limited shared handler: %d leases expired as counted attempts and %d jobs "+
			"dead-lettered (%d never run by team A) in 20 s: its topic was given ~%d unextended references where half a lease at "+
			"its pace is 8", expired, len(ids), neverRan, unext)
	}
}
