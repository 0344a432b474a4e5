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
)

// review173Service starts a consumer service of handler "shared" (patterns
// provider/*) on pool running fn.
func review173Service(t *testing.T, rr *reviewRouting, pool *pgxpool.Pool, workerID string, providers []string, maxAttempts, concurrency int,
	fn func(context.Context, *consumers.Event) error) *consumers.Service {
	t.Helper()
	return review185Service(t, rr, pool, workerID, providers, concurrency, consumers.Handler{MaxAttempts: maxAttempts}, fn)
}

// TestStoppingRoleGivesUpItsRouteWhileDraining (review helper-173, fixed; this describes the code before the fix):
//
// a handler shared by a scoped role (team A, scope stripe) and
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
// Now: a stopping service says, once its subscriptions end, that it is
// there but not alive (consumers.alive_until = now, seen_at kept for the
// reaper), so its role is no longer routed to while it drains; the jobs are
// the platform's, each completed, run once.
func TestStoppingRoleGivesUpItsRouteWhileDraining(t *testing.T) {
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
