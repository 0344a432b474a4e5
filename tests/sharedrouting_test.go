package tests

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inlet-dev/inlet/consumers"
	"github.com/inlet-dev/inlet/internal/testwait"
	"github.com/inlet-dev/inlet/schema"
	"github.com/inlet-dev/inlet/schema/queries"
	"github.com/inlet-dev/inlet/streamer"
)

// reviewRouting is the shared fixture of the routing review tests: the
// in-process bus, a handler "shared", and a record of who ran each job.
type reviewRouting struct {
	p   *pipeline
	mu  sync.Mutex
	ran map[int64][]string // job id: the teams that ran it
}

func newReviewRouting(t *testing.T) *reviewRouting {
	return &reviewRouting{p: newPipeline(t), ran: map[int64][]string{}}
}

// role creates a scoped consumer role for handler "shared" with one scope
// (provider, any type) and returns its name; suffix orders roles by name.
func (rr *reviewRouting) role(t *testing.T, suffix, scope string) string {
	t.Helper()
	role := fmt.Sprintf("webhook_consumer_rv%d_%d_%s", os.Getpid(), sharedRoleSeq.Add(1), suffix)
	if _, err := queries.New(rr.p.admin).CreateConsumerRole(context.Background(), queries.CreateConsumerRoleParams{Role: role,
		Handlers: []string{"shared"}, ScopeProviders: []string{scope}, ScopeTypes: []string{"*"}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := queries.New(rr.p.admin).DropConsumerRole(context.Background(), role); err != nil {
			t.Errorf("drop role %s: %v", role, err)
		}
	})
	return role
}

// service starts a consumer service of handler "shared" (patterns
// provider/*, max_attempts 1: one misrouted reference dead-letters its
// job) on pool; workerID "" keeps the SDK's default.
func (rr *reviewRouting) service(t *testing.T, name string, pool *pgxpool.Pool, workerID, provider string) *consumers.Service {
	t.Helper()
	svc, err := consumers.New(consumers.Config{
		Pool: pool, Subscriber: rr.p.bus, WorkerID: workerID, Logger: rr.p.quiet,
		AliveInterval: 200 * time.Millisecond,
		Handlers: []consumers.Handler{{Name: "shared", Provider: provider, MaxAttempts: 1, Concurrency: 4,
			Func: func(_ context.Context, e *consumers.Event) error {
				rr.mu.Lock()
				rr.ran[e.JobID] = append(rr.ran[e.JobID], name+":"+e.Provider)
				rr.mu.Unlock()
				return nil
			}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = svc.Stop(sctx)
	})
	return svc
}

func (rr *reviewRouting) startStreamer(t *testing.T) {
	rr.p.startStreamer(t, streamer.Config{ID: "s1", LeaseDuration: 2 * time.Second, PollInterval: 50 * time.Millisecond,
		ReapInterval: 100 * time.Millisecond})
}

// insert stores n events per provider (type "x").
func (rr *reviewRouting) insert(t *testing.T, tag string, n int, providers ...string) {
	t.Helper()
	for _, pr := range providers {
		if _, err := rr.p.admin.Exec(context.Background(), `INSERT INTO webhook_ingress.events
			(provider, scheme, external_event_id, event_type, raw_body, signature_verified)
			SELECT $2, 'stripe', 'evt_rv_' || $3 || '_' || $2 || '_' || g, 'x', '{}', true
			FROM generate_series(1, $1) g`, n, pr, tag); err != nil {
			t.Fatal(err)
		}
	}
}

// check waits for every job of "shared" to finish and requires each
// completed, run once, by owner(provider); and no attempt expired.
func (rr *reviewRouting) check(t *testing.T, owner map[string]string) {
	t.Helper()
	ctx := context.Background()
	testwait.Eventually(t, 60*time.Second, "every job of the shared handler finished", func() (bool, string) {
		var open int
		err := rr.p.admin.QueryRow(ctx, `SELECT count(*) FROM webhook_ingress.jobs
			WHERE handler = 'shared' AND status NOT IN ('completed', 'dead_letter')`).Scan(&open)
		return err == nil && open == 0, fmt.Sprintf("%d open (%v)", open, err)
	})
	rows, err := rr.p.admin.Query(ctx, `SELECT j.id, e.provider, j.status::text, coalesce(j.last_error_class, '')
		FROM webhook_ingress.jobs j JOIN webhook_ingress.events e ON e.id = j.event_id WHERE j.handler = 'shared'`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	bad, n := 0, 0
	for rows.Next() {
		var id int64
		var provider, status, class string
		if err := rows.Scan(&id, &provider, &status, &class); err != nil {
			t.Fatal(err)
		}
		n++
		rr.mu.Lock()
		got := rr.ran[id]
		rr.mu.Unlock()
		if status != "completed" || len(got) != 1 || got[0] != owner[provider]+":"+provider {
			bad++
			if bad <= 5 {
				t.Errorf("job %d (%s): %s %s, run by %v; want completed, run once by %s", id, provider, status, class, got, owner[provider])
			}
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Fatal("no job of the shared handler")
	}
	if bad > 0 {
		t.Errorf("%d of %d jobs of the shared handler were not run by a consumer that may take them", bad, n)
	}
}

// TestTwoRolesInOneProcessAreRoutedWithDefaultWorkerIDs (review helper-172, fixed; this describes the code before the fix):
// two consumer services of different scoped roles sharing a handler
// in ONE process (the SDK allows any number of Services; docs/pipeline.md:
// "consumers of one handler in one process share its topic") with the
// default WorkerID (hostname-pid, consumers/config.go:113) write the same
// webhook_ingress.consumers row (handler, worker_id): ConsumerAlive
// (schema/queries/jobs.sql:371-375) upserts db_role = excluded.db_role, so
// the row flips between the two roles and ListJobRoutes (jobs.sql:343-356)
// never sees two roles for the handler. The handler is never routed per
// role: both services read inlet.jobs.shared, each gets the other team's
// references, cannot see those jobs (RLS), skips them, and the leases
// expire as spent attempts (dead_letter / lease_expired, never run).
// Now: every job is run by the team whose scope covers it, as with
// distinct WorkerIDs (TestSharedHandlerJobsReachTheRoleThatMayTakeThem).
func TestTwoRolesInOneProcessAreRoutedWithDefaultWorkerIDs(t *testing.T) {
	rr := newReviewRouting(t)
	a := rr.role(t, "a", "stripe")
	b := rr.role(t, "b", "github")
	rr.service(t, "team-a", rr.p.pool(t, a, 8), "", "stripe")
	rr.service(t, "team-b", rr.p.pool(t, b, 8), "", "github")
	rr.startStreamer(t)
	rr.insert(t, "inproc", 40, "stripe", "github")
	rr.check(t, map[string]string{"stripe": "team-a", "github": "team-b"})
}

// TestScopedRoleBesideWorkerLeavesWorkersJobs (review helper-172, fixed; this describes the code before the fix, regression of 064 against 063):
// a handler run by ONE scoped role
// (team A, scope stripe) and by webhook_worker consumers (the platform team,
// unrestricted: every other source) is never routed: ListJobRoutes
// (schema/queries/jobs.sql:348-349) routes only handlers with two scoped
// roles or more, and webhook_worker says no db_role. So every job is
// published on inlet.jobs.shared, which team A's consumers read too
// (consumers/service.go:252); a github job handed to team A cannot be seen
// by it (038's scope policy), is skipped (consumers/attempt.go, ErrNoRows),
// and its lease expires as a spent attempt: with max_attempts 1 the job is
// dead-lettered unrun although the platform's consumer was there to run it.
// 063's pass-on gave such a lease back uncounted; 064 removed it and routes
// only the two-scoped-roles case, so this setup (the first step of moving
// one team off webhook_worker) lost the protection. docs/operations.md
// promises "each team's jobs reach that team's consumers only".
// Now: every github job is run by the webhook_worker consumer; none
// expires.
func TestScopedRoleBesideWorkerLeavesWorkersJobs(t *testing.T) {
	rr := newReviewRouting(t)
	a := rr.role(t, "a", "stripe")
	rr.service(t, "team-a", rr.p.pool(t, a, 8), "team-a", "stripe")
	rr.service(t, "platform", rr.p.pool(t, schema.WorkerRole, 8), "platform", "github")
	rr.startStreamer(t)
	rr.insert(t, "worker", 40, "github")
	rr.check(t, map[string]string{"github": "platform"})
}

// TestOverlappingScopesPreferALiveRole (review helper-172, fixed; this describes the code before the fix, regression against 063):
// two scoped roles of a shared handler
// with overlapping scopes (both: stripe). Team A (first by name) stops
// gracefully (ConsumerGone); team B is alive and may take every stripe job.
// ListJobRoutes (schema/queries/jobs.sql:343-347) keeps a role's consumers
// rows whatever their alive_until (ended rows stay a day), and topicOf
// (streamer/routes.go:41-47) picks the first role by name whose scope
// covers the job, alive or not: every stripe job goes to A's topic, which
// nobody reads, its lease expires and is counted (B is alive), and with
// max_attempts 1 it is dead-lettered unrun, for up to a day, although a
// live consumer allowed to run it reads its own topic. In 063 both read the
// handler's topic and B ran them.
// Now: a job goes to a role with a live consumer whose scope covers
// it (B here).
func TestOverlappingScopesPreferALiveRole(t *testing.T) {
	rr := newReviewRouting(t)
	a := rr.role(t, "a", "stripe")
	b := rr.role(t, "b", "stripe")
	svcA := rr.service(t, "team-a", rr.p.pool(t, a, 8), "team-a", "stripe")
	rr.service(t, "team-b", rr.p.pool(t, b, 8), "team-b", "stripe")
	rr.startStreamer(t)
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := svcA.Stop(sctx); err != nil {
		t.Fatal(err)
	}
	// Past the route table's refresh (streamer/routes.go routesRefresh).
	time.Sleep(1500 * time.Millisecond)
	rr.insert(t, "overlap", 20, "stripe")
	rr.check(t, map[string]string{"stripe": "team-b"})
}
