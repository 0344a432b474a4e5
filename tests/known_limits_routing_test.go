//go:build knownlimits

package tests

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inlet-dev/inlet/consumers"
	"github.com/inlet-dev/inlet/internal/testwait"
	"github.com/inlet-dev/inlet/schema"
	"github.com/inlet-dev/inlet/streamer"
)

// review173Service starts a consumer service of handler "shared" (patterns
// provider/*) on pool running fn.
func review173Service(t *testing.T, rr *reviewRouting, pool *pgxpool.Pool, workerID string, providers []string, maxAttempts, concurrency int,
	fn func(context.Context, *consumers.Event) error) *consumers.Service {
	t.Helper()
	var patterns []consumers.Pattern
	for _, pr := range providers {
		patterns = append(patterns, consumers.Pattern{Provider: pr, EventType: "*"})
	}
	svc, err := consumers.New(consumers.Config{
		Pool: pool, Subscriber: rr.p.bus, WorkerID: workerID, Logger: rr.p.quiet,
		AliveInterval: 200 * time.Millisecond, LeaseExtend: time.Second,
		Handlers: []consumers.Handler{{Name: "shared", Patterns: patterns, MaxAttempts: maxAttempts, Concurrency: concurrency, Func: fn}},
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

// TestKnownLimitStoppingRoleKeepsItsRouteDuringDrain (review helper-173; a known limit, docs/operations.md "A database role per consumer": fails on this code).
//
// Defect: a handler shared by a scoped role (team A, scope stripe) and
// webhook_worker (the platform, unrestricted). Team A's last consumer stops
// gracefully while one of its attempts is still running (Stop drains it).
// Stop cancels the subscriptions first (consumers/service.go stop:
// s.subCancel()), but the consumer keeps saying alive all through the drain
// (aliveLoop is cancelled only in stopBackground, after the attempts end;
// ConsumerGone is written then). So ListJobRoutes keeps team A as a role
// "with a live consumer", tried first and scoped before unrestricted, and
// the streamer publishes every new stripe job on inlet.jobs.shared.<A>,
// which nobody reads any more. Their leases expire and the reaper counts
// them (the platform's consumer of the handler is alive:
// ReapExpiredLeases' `c.seen_at >= j.attempted_at` is per handler, not per
// role), so with max_attempts 1 they are dead-lettered (lease_expired)
// unrun, although a live unrestricted consumer that may take them reads its
// own topic (inlet.jobs.shared._). With one team (no routing) the same
// graceful stop costs no attempt (its ConsumerGone sets seen_at -infinity).
// The jobs here are inserted 1.5 s into the drain, past the route table's
// one-second refresh, so they are not lost to the route cache.
//
// Expected: jobs that arrive while a role's consumers are draining are
// routed to a role still reading (the platform here), or at least not
// counted; each completed, run once by the platform.
//
// Fix: say a stopping service's liveness rows ended (ConsumerGone, or a
// "draining" mark ListJobRoutes treats as not live) when its subscriptions
// are cancelled, not after the drain (its running attempts are covered by
// their extended leases: worker_id); and/or judge a routed job's expired
// lease by the liveness of the role whose topic it went to.
func TestKnownLimitStoppingRoleKeepsItsRouteDuringDrain(t *testing.T) {
	rr := newReviewRouting(t)
	a := rr.role(t, "a", "stripe")

	release := make(chan struct{})
	var releaseOnce sync.Once
	releaseFn := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(releaseFn)
	var blockerRunning atomic.Bool
	record := func(name string) func(context.Context, *consumers.Event) error {
		return func(ctx context.Context, e *consumers.Event) error {
			rr.mu.Lock()
			rr.ran[e.JobID] = append(rr.ran[e.JobID], name+":"+e.Provider)
			rr.mu.Unlock()
			if name == "team-a" && !blockerRunning.Swap(true) {
				select { // the first attempt holds team A's drain open
				case <-release:
				case <-time.After(20 * time.Second):
				}
			}
			return nil
		}
	}
	svcA := review173Service(t, rr, rr.p.pool(t, a, 8), "team-a", []string{"stripe"}, 1, 4, record("team-a"))
	review173Service(t, rr, rr.p.pool(t, schema.WorkerRole, 8), "platform", []string{"stripe", "github"}, 1, 4, record("platform"))
	rr.startStreamer(t)

	rr.insert(t, "blocker", 1, "stripe")
	testwait.Eventually(t, 20*time.Second, "team A runs the first stripe job", func() (bool, string) {
		return blockerRunning.Load(), "not yet"
	})
	stopped := make(chan error, 1)
	go func() {
		sctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		stopped <- svcA.Stop(sctx)
	}()
	// Past the route table's refresh (streamer/routes.go routesRefresh).
	time.Sleep(1500 * time.Millisecond)
	rr.insert(t, "draining", 10, "stripe")

	// Hold the drain until the new jobs finished (or a lease and a half).
	ctx := context.Background()
	testwait.Eventually(t, 20*time.Second, "the jobs inserted during the drain finished", func() (bool, string) {
		var open int
		err := rr.p.admin.QueryRow(ctx, `SELECT count(*) FROM webhook_ingress.jobs j JOIN webhook_ingress.events e ON e.id = j.event_id
			WHERE j.handler = 'shared' AND e.external_event_id LIKE 'evt_rv_draining_%' AND j.status NOT IN ('completed', 'dead_letter')`).Scan(&open)
		return err == nil && open == 0, fmt.Sprintf("%d open (%v)", open, err)
	})
	releaseFn()
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}

	rows, err := rr.p.admin.Query(ctx, `SELECT j.id, j.status::text, coalesce(j.last_error_class, '')
		FROM webhook_ingress.jobs j JOIN webhook_ingress.events e ON e.id = j.event_id
		WHERE j.handler = 'shared' AND e.external_event_id LIKE 'evt_rv_draining_%' ORDER BY j.id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	bad, n := 0, 0
	for rows.Next() {
		var id int64
		var status, class string
		if err := rows.Scan(&id, &status, &class); err != nil {
			t.Fatal(err)
		}
		n++
		rr.mu.Lock()
		got := rr.ran[id]
		rr.mu.Unlock()
		if status != "completed" || len(got) != 1 {
			bad++
			if bad <= 3 {
				t.Errorf("job %d (stripe, inserted while team A drained): %s %s, run by %v; want completed, run once by the live platform consumer",
					id, status, class, got)
			}
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if n != 10 {
		t.Fatalf("%d jobs inserted during the drain, want 10", n)
	}
	if bad > 0 {
		t.Errorf("%d of %d jobs that arrived while team A's consumer drained were published on its topic (nobody reading) and dead-lettered unrun", bad, n)
	}
}

// TestKnownLimitSlowRoleBacklogPacedByFastRole (review helper-173; a known limit, docs/operations.md "A database role per consumer": fails on this code).
//
// Defect: the streamer's pacing (streamer/inflight.go: capOf, unext, the
// pace of handlerPace) is per handler, but a routed handler's jobs go to
// different topics read by different consumers (one per role). A handler
// shared by a slow scoped role (team A: stripe, concurrency 1, 50 ms a job)
// and a fast webhook_worker consumer (the platform: github, instant): the
// pace read from the platform's completions (thousands a second) lets the
// streamer lease the whole stripe backlog at once onto team A's topic, far
// more than team A starts within a lease. Those references wait unextended,
// their leases expire and are counted (team A's consumer is alive), so team
// A's jobs burn attempts and are dead-lettered without their handler ever
// being called: exactly what the pacing was built to prevent for a slow
// handler (review helper-117, tests/pacing_test.go), back for a slow role.
// Alone, team A's handler is held to its own pace and none expires
// (TestSlowHandlerBacklogWithDefaultBatch).
//
// Expected: team A's jobs are leased at team A's pace: none is
// dead-lettered (max_attempts 2) without being run; each completes.
//
// Fix: keep the pace and the unextended count per route (handler, role
// topic) for routed handlers — CountLeasedJobs grouped by the role the
// job is routed to, or the streamer's own per-topic tally — and hold each
// topic to its consumers' pace.
func TestKnownLimitSlowRoleBacklogPacedByFastRole(t *testing.T) {
	rr := newReviewRouting(t)
	a := rr.role(t, "a", "stripe")
	var mu sync.Mutex
	calls := map[int64]int{}
	review173Service(t, rr, rr.p.pool(t, a, 8), "team-a", []string{"stripe"}, 2, 1, func(_ context.Context, e *consumers.Event) error {
		mu.Lock()
		calls[e.JobID]++
		mu.Unlock()
		time.Sleep(50 * time.Millisecond) // slow but healthy
		return nil
	})
	review173Service(t, rr, rr.p.pool(t, schema.WorkerRole, 8), "platform", []string{"stripe", "github"}, 2, 16, func(context.Context, *consumers.Event) error {
		return nil
	})
	// Interleaved backlog: one stripe job in 20 (200 stripe = 10 s of team
	// A's work; 3,800 github).
	if _, err := rr.p.admin.Exec(context.Background(), `INSERT INTO webhook_ingress.events
		(provider, scheme, external_event_id, event_type, raw_body, signature_verified)
		SELECT CASE WHEN g % 20 = 0 THEN 'stripe' ELSE 'github' END, 'stripe', 'evt_pace_' || g, 'x', '{}', true
		FROM generate_series(1, 4000) g`); err != nil {
		t.Fatal(err)
	}
	rr.p.startStreamer(t, streamer.Config{ID: "s1", LeaseDuration: 4 * time.Second, PollInterval: 50 * time.Millisecond,
		ReapInterval: 100 * time.Millisecond})

	ctx := context.Background()
	testwait.Eventually(t, 120*time.Second, "every job finished", func() (bool, string) {
		var open int
		err := rr.p.admin.QueryRow(ctx, `SELECT count(*) FROM webhook_ingress.jobs
			WHERE handler = 'shared' AND status NOT IN ('completed', 'dead_letter')`).Scan(&open)
		return err == nil && open == 0, fmt.Sprintf("%d open (%v)", open, err)
	})
	var expired, dead, neverRan int
	rows, err := rr.p.admin.Query(ctx, `SELECT j.id, j.status::text,
			(SELECT count(*) FROM webhook_ingress.job_attempts a WHERE a.job_id = j.id AND a.outcome = 'lease_expired')
		FROM webhook_ingress.jobs j JOIN webhook_ingress.events e ON e.id = j.event_id
		WHERE j.handler = 'shared' AND e.provider = 'stripe'`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var id, n int64
		var status string
		if err := rows.Scan(&id, &status, &n); err != nil {
			t.Fatal(err)
		}
		expired += int(n)
		if status != "completed" {
			dead++
			mu.Lock()
			if calls[id] == 0 {
				neverRan++
			}
			mu.Unlock()
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	// Alone (same backlog, no platform consumer) a few leases may expire on
	// a loaded machine (3 seen here) but none is dead-lettered; beside the
	// fast platform consumer, 145 expired and 25 were dead-lettered unrun.
	if dead > 0 {
		t.Errorf("team A's stripe jobs: %d lease_expired attempts, %d not completed (%d of them never run by team A): "+
			"leased at the platform's pace onto team A's topic", expired, dead, neverRan)
	}
}
