package tests

// A limited handler (breaker or max_in_flight) shared by scoped consumer
// roles while one role has no live consumer (review helper-291, fixed in
// migration 076: claim_limited_jobs leases only jobs a live consumer could
// receive).

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inlet-dev/inlet/consumers"
	"github.com/inlet-dev/inlet/internal/testwait"
	"github.com/inlet-dev/inlet/streamer"
)

// TestSharedHandlerProbeSkipsDownRolesJob (review helper-291): a handler
// shared by two scoped consumer roles (docs/operations.md "A database role
// per consumer") with a circuit breaker closes its circuit while every
// consumer of ONE role is down, once the other role's downstream works
// again. Before 076, claim_limited_jobs picked the probe as the handler's
// first due job whoever could run it: a job only the down role covers went
// to that role's topic, nobody took it, the reaper gave it back uncounted
// with its due time kept, and the next probe was the very same job, for as
// long as the role stayed down (the circuit half_open, the healthy role fed
// nothing). Now the probe is chosen among jobs a live consumer could
// receive; the down role's job waits, pending and never leased, and runs
// once its role is back.
// Setup: real PostgreSQL, in-process bus, one streamer (lease 2 s). Handler
// "shared", BreakerFailures 1, BreakerProbeInterval 1 s, run by role A
// (scope stripe) and role B (scope github). Both consumers start, then B's
// stops gracefully. A stripe job fails on A (circuit open); then a github
// job g1 (only B covers it) and a stripe job s2 arrive, g1 first.
func TestSharedHandlerProbeSkipsDownRolesJob(t *testing.T) {
	rr := newReviewRouting(t)
	ctx := context.Background()
	a := rr.role(t, "a", "stripe")
	b := rr.role(t, "b", "github")

	rs := &review291Runs{ran: map[string]int{}}
	newSvc := func(worker string, pool *pgxpool.Pool, provider string) *consumers.Service {
		return rs.service(t, rr, worker, pool, provider, func(h *consumers.Handler) {
			h.BreakerFailures, h.BreakerProbeInterval = 1, time.Second
		})
	}
	newSvc("team-a", rr.p.pool(t, a, 8), "stripe")
	svcB := newSvc("team-b", rr.p.pool(t, b, 8), "github")
	rr.p.startStreamer(t, streamer.Config{ID: "s1", LeaseDuration: 2 * time.Second, PollInterval: 50 * time.Millisecond,
		ReapInterval: 100 * time.Millisecond})
	testwait.Eventually(t, 20*time.Second, "the handler routed per role", func() (bool, string) {
		var roles int
		err := rr.p.admin.QueryRow(ctx, `SELECT count(DISTINCT db_role) FROM webhook_ingress.consumers
			WHERE handler = 'shared' AND db_role IS NOT NULL AND alive_until > now()`).Scan(&roles)
		return err == nil && roles == 2, fmt.Sprintf("%d roles alive (%v)", roles, err)
	})

	// Team B's consumers go down (a deploy, an outage of their own).
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := svcB.Stop(sctx); err != nil {
		t.Fatal(err)
	}

	insert := func(provider, id string) {
		t.Helper()
		if _, err := rr.p.admin.Exec(ctx, `INSERT INTO webhook_ingress.events
			(provider, scheme, external_event_id, event_type, raw_body, signature_verified)
			VALUES ($1, 'stripe', $2, 'x', '{}', true)`, provider, id); err != nil {
			t.Fatal(err)
		}
	}
	circuit := func() string {
		var c string
		if err := rr.p.admin.QueryRow(ctx, `SELECT circuit::text FROM webhook_ingress.handler_limits WHERE handler = 'shared'`).Scan(&c); err != nil {
			t.Fatal(err)
		}
		return c
	}
	// Team A's downstream fails once: the circuit opens.
	insert("stripe", "evt_fail_1")
	testwait.Eventually(t, 30*time.Second, "circuit open after team A's failure", func() (bool, string) {
		c := circuit()
		return c == "open", "circuit " + c
	})
	// A github job (team B's alone) and then a stripe job (team A's).
	insert("github", "evt_g1")
	time.Sleep(20 * time.Millisecond) // g1 due strictly before s2
	insert("stripe", "evt_s2")

	// A's downstream works again: a probe that reaches s2 closes the
	// circuit. Probes come every second (and after each 2 s lease).
	g1Leased := map[time.Time]bool{} // g1's distinct lease times seen
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if rs.count("evt_s2") > 0 {
			break
		}
		var at *time.Time
		if err := rr.p.admin.QueryRow(ctx, `SELECT j.attempted_at FROM webhook_ingress.jobs j
			JOIN webhook_ingress.events e ON e.id = j.event_id
			WHERE j.handler = 'shared' AND e.external_event_id = 'evt_g1'`).Scan(&at); err != nil {
			t.Fatal(err)
		}
		if at != nil {
			g1Leased[*at] = true
		}
		time.Sleep(100 * time.Millisecond)
	}
	g1 := func() (status string, attempts, rows int) {
		t.Helper()
		if err := rr.p.admin.QueryRow(ctx, `SELECT j.status::text, j.attempt_count,
				(SELECT count(*) FROM webhook_ingress.job_attempts x WHERE x.job_id = j.id)
			FROM webhook_ingress.jobs j JOIN webhook_ingress.events e ON e.id = j.event_id
			WHERE j.handler = 'shared' AND e.external_event_id = 'evt_g1'`).Scan(&status, &attempts, &rows); err != nil {
			t.Fatal(err)
		}
		return status, attempts, rows
	}
	if rs.count("evt_s2") == 0 {
		g1Status, g1Attempts, g1Leases := g1()
		var s2Status string
		if err := rr.p.admin.QueryRow(ctx, `SELECT j.status::text FROM webhook_ingress.jobs j
			JOIN webhook_ingress.events e ON e.id = j.event_id
			WHERE j.handler = 'shared' AND e.external_event_id = 'evt_s2'`).Scan(&s2Status); err != nil {
			t.Fatal(err)
		}
		t.Fatalf("30 s after team A's job s2 arrived it never ran (status %s), circuit %s: the probe keeps landing on team B's "+
			"job g1 (leased %d times, status %s, attempt_count %d, attempt rows %d), which only the down role B may take; "+
			"runs %s; want a probe to reach the healthy role's job and close the circuit",
			s2Status, circuit(), len(g1Leased), g1Status, g1Attempts, g1Leases, rs.String())
	}
	testwait.Eventually(t, 10*time.Second, "circuit closed by the probe on s2", func() (bool, string) {
		c := circuit()
		return c == "closed", "circuit " + c
	})
	// g1 waited, never leased: only the down role may run it.
	if st, att, rows := g1(); len(g1Leased) != 0 || st != "pending" || att != 0 || rows != 0 {
		t.Fatalf("team B's job g1 while B was down: leased %d times, status %s, attempt_count %d, attempt rows %d; "+
			"want never leased (pending, 0, 0)", len(g1Leased), st, att, rows)
	}
	// Team B comes back: g1 runs, once.
	newSvc("team-b", rr.p.pool(t, b, 8), "github")
	testwait.Eventually(t, 30*time.Second, "g1 completed once team B is back", func() (bool, string) {
		st, att, _ := g1()
		return st == "completed", fmt.Sprintf("g1 %s after %d attempts", st, att)
	})
	if n, m := rs.count("evt_g1"), rs.count("evt_s2"); n != 1 || m != 1 {
		t.Fatalf("g1 ran %d times, s2 %d times; want once each (runs %s)", n, m, rs.String())
	}
}

// TestInFlightSlotsSkipDownRolesJobs (review helper-291): a handler shared
// by two scoped consumer roles with MaxInFlight runs the healthy role's jobs
// while the other role is down and has MaxInFlight jobs due ahead of them.
// Before 076 the in-flight limit was spent, lease after lease, on the down
// role's references, which nobody took and the reaper gave back uncounted
// with their due time kept (docs/pipeline.md: MaxInFlight is a cap, not a
// reservation for a role that is away). The down role's jobs now wait,
// pending and never leased, and run once the role is back.
// Setup: real PostgreSQL, in-process bus, one streamer (lease 2 s). Handler
// "shared", MaxInFlight 2, run by role A (scope stripe) and role B (scope
// github); B's consumer stops gracefully. Two github jobs (B's alone)
// arrive, then one stripe job s1 (A's).
func TestInFlightSlotsSkipDownRolesJobs(t *testing.T) {
	rr := newReviewRouting(t)
	ctx := context.Background()
	a := rr.role(t, "a", "stripe")
	b := rr.role(t, "b", "github")
	rs := &review291Runs{ran: map[string]int{}}
	limits := func(h *consumers.Handler) { h.MaxInFlight = 2 }
	rs.service(t, rr, "team-a", rr.p.pool(t, a, 8), "stripe", limits)
	svcB := rs.service(t, rr, "team-b", rr.p.pool(t, b, 8), "github", limits)
	rr.p.startStreamer(t, streamer.Config{ID: "s1", LeaseDuration: 2 * time.Second, PollInterval: 50 * time.Millisecond,
		ReapInterval: 100 * time.Millisecond})
	testwait.Eventually(t, 20*time.Second, "the handler routed per role", func() (bool, string) {
		var roles int
		err := rr.p.admin.QueryRow(ctx, `SELECT count(DISTINCT db_role) FROM webhook_ingress.consumers
			WHERE handler = 'shared' AND db_role IS NOT NULL AND alive_until > now()`).Scan(&roles)
		return err == nil && roles == 2, fmt.Sprintf("%d roles alive (%v)", roles, err)
	})
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := svcB.Stop(sctx); err != nil {
		t.Fatal(err)
	}
	insert := func(provider, id string) {
		t.Helper()
		if _, err := rr.p.admin.Exec(ctx, `INSERT INTO webhook_ingress.events
			(provider, scheme, external_event_id, event_type, raw_body, signature_verified)
			VALUES ($1, 'stripe', $2, 'x', '{}', true)`, provider, id); err != nil {
			t.Fatal(err)
		}
	}
	insert("github", "evt_g1")
	insert("github", "evt_g2")
	time.Sleep(20 * time.Millisecond) // the github jobs due strictly before s1
	insert("stripe", "evt_s1")

	leases := map[string]bool{} // distinct (job, lease time) of the github jobs seen
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if rs.count("evt_s1") > 0 {
			break
		}
		rows, err := rr.p.admin.Query(ctx, `SELECT j.id, j.attempted_at FROM webhook_ingress.jobs j
			WHERE j.handler = 'shared' AND j.provider = 'github' AND j.attempted_at IS NOT NULL`)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var id int64
			var at time.Time
			if err := rows.Scan(&id, &at); err != nil {
				t.Fatal(err)
			}
			leases[fmt.Sprint(id, at)] = true
		}
		rows.Close()
		time.Sleep(100 * time.Millisecond)
	}
	github := func() (s1Status string, attemptRows, leased, completed int) {
		t.Helper()
		if err := rr.p.admin.QueryRow(ctx, `SELECT
				(SELECT j.status::text FROM webhook_ingress.jobs j JOIN webhook_ingress.events e ON e.id = j.event_id
				 WHERE j.handler = 'shared' AND e.external_event_id = 'evt_s1'),
				(SELECT count(*) FROM webhook_ingress.job_attempts x JOIN webhook_ingress.jobs j ON j.id = x.job_id
				 WHERE j.handler = 'shared' AND j.provider = 'github'),
				(SELECT count(*) FROM webhook_ingress.jobs WHERE handler = 'shared' AND provider = 'github' AND status = 'leased'),
				(SELECT count(*) FROM webhook_ingress.jobs WHERE handler = 'shared' AND provider = 'github' AND status = 'completed')`).
			Scan(&s1Status, &attemptRows, &leased, &completed); err != nil {
			t.Fatal(err)
		}
		return s1Status, attemptRows, leased, completed
	}
	if rs.count("evt_s1") == 0 {
		s1Status, gAttemptRows, gLeased, _ := github()
		t.Fatalf("30 s after team A's job s1 arrived it never ran (status %s): the handler's 2 in-flight slots went, lease after "+
			"lease, to team B's github jobs (%d distinct leases seen, %d leased now, %d attempt rows: every expiry uncounted), "+
			"which only the down role B may take; runs %s; want s1 run within a lease or two",
			s1Status, len(leases), gLeased, gAttemptRows, rs.String())
	}
	if len(leases) != 0 {
		t.Fatalf("team B's github jobs were leased %d times while B was down; want never (only B may run them)", len(leases))
	}
	// Team B comes back: its two jobs run, once each.
	rs.service(t, rr, "team-b", rr.p.pool(t, b, 8), "github", limits)
	testwait.Eventually(t, 30*time.Second, "the github jobs completed once team B is back", func() (bool, string) {
		_, _, leased, completed := github()
		return completed == 2, fmt.Sprintf("%d completed, %d leased", completed, leased)
	})
	if g1, g2, s1 := rs.count("evt_g1"), rs.count("evt_g2"), rs.count("evt_s1"); g1 != 1 || g2 != 1 || s1 != 1 {
		t.Fatalf("runs %s; want g1, g2 and s1 once each", rs.String())
	}
}

// review291Runs counts the calls of the test's handlers by event id.
type review291Runs struct {
	mu  sync.Mutex
	ran map[string]int
}

func (rs *review291Runs) count(id string) int {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return rs.ran[id]
}

func (rs *review291Runs) String() string {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return fmt.Sprint(rs.ran)
}

// service starts a consumer of handler "shared" for provider on pool (the
// role's), whose handler fails events whose id contains "fail" (backoff an
// hour) and succeeds on the others; limits sets the handler's limits.
func (rs *review291Runs) service(t *testing.T, rr *reviewRouting, worker string, pool *pgxpool.Pool, provider string,
	limits func(*consumers.Handler)) *consumers.Service {
	t.Helper()
	h := consumers.Handler{Name: "shared", Provider: provider, MaxAttempts: 5, Concurrency: 2,
		Backoff: func(int) time.Duration { return time.Hour },
		Func: func(_ context.Context, e *consumers.Event) error {
			rs.mu.Lock()
			rs.ran[e.ExternalID]++
			rs.mu.Unlock()
			if strings.Contains(e.ExternalID, "fail") {
				return errors.New("downstream down")
			}
			return nil
		}}
	limits(&h)
	svc, err := consumers.New(consumers.Config{
		Pool: pool, Subscriber: rr.p.bus, WorkerID: worker, Logger: rr.p.quiet,
		AliveInterval: 200 * time.Millisecond, Handlers: []consumers.Handler{h},
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
