package monitor_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/schema/queries"
)

// TestLagSurvivesABusOutage
//
// Regression test (review helper-102; fixed: the text describes the behaviour
// before the fix). the fix of 61879cb made a reaped lease keep its job's due time so
// that inlet_handler_lag_seconds ("age of the handler's oldest undelivered
// job since it became due", docs/operations.md) keeps rising during a
// consumer outage. The other give-back paths still reset the due time to
// now(): ReleaseJobs (schema/queries/jobs.sql, `next_attempt_at = now()`),
// which the streamer runs every time the bus refuses a publish
// (streamer/streamer.go publish → ReleaseJobs; publishHolds re-claims the
// handler after at most 5s), and likewise ReleaseUnseenJobs and
// give_back_attempt. So during a NATS outage the job is claimed, refused,
// given back due "now", claimed again 0.1–5s later…: the gauge stays under
// ~5s for as long as the bus is down, while nothing is delivered. The alert
// operators are told to set on it cannot fire during a bus outage.
//
// Expected: after a give-back the lag of a job due for 2h is still ≥ 2h.
func TestLagSurvivesABusOutage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	super, streamer, reg := jobDueTwoHours(t)

	// The streamer claims it (the real statement, as webhook_streamer)...
	q := queries.New(streamer)
	rows, err := q.ClaimJobs(ctx, queries.ClaimJobsParams{FullHandlers: []string{}, BatchSize: 10, LeaseHolder: "streamer-1", LeaseFor: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 {
		t.Fatalf("precondition: claimed %d jobs, want 1", len(rows))
	}
	// ... the bus refuses the publish (NATS down), and it gives the lease
	// back as streamer.publish does.
	if err := q.ReleaseJobs(ctx, queries.ReleaseJobsParams{LeaseHolder: "streamer-1", JobIds: []int64{rows[0].ID},
		Attempts: []int32{rows[0].AttemptCount}, LeasedAt: []time.Time{rows[0].AttemptedAt}}); err != nil {
		t.Fatal(err)
	}
	var status string
	if err := super.QueryRow(ctx, `SELECT status FROM webhook_ingress.jobs WHERE handler = 'billing'`).Scan(&status); err != nil || status != "pending" {
		t.Fatalf("precondition: status %q, %v; want pending (given back)", status, err)
	}

	if l := handlerLag(t, reg, "billing"); l < 7190 {
		t.Errorf("inlet_handler_lag_seconds{handler=billing} = %.1fs after a publish the bus refused; the job is still undelivered "+
			"2h after it became due, want ≥ 7200s (ReleaseJobs' next_attempt_at = now() reset it)", l)
	}
}

// TestLagScrapeReadsOnlyOpenJobs
//
// Regression test (review helper-102; fixed: the text describes the behaviour
// before the fix). schema/queries/monitor.sql promises its queries "read through the
// partial indexes of jobs, never the finished jobs". MonitorLag (run on
// every /metrics scrape) now filters `status IN ('pending', 'failed',
// 'leased')`: no partial index covers that set (idx_jobs_claimable and
// idx_jobs_due_by_handler are on pending/failed only; idx_jobs_leased on
// lease_expires_at IS NOT NULL), so the plan is a sequential scan of every
// jobs partition, completed jobs (the vast majority of the table) included.
// Before 61879cb it read idx_jobs_claimable only.
//
// Expected: no Seq Scan of the jobs partition that holds the jobs (19980
// completed, 20 open) in MonitorLag's plan; the query before 61879cb read it
// through its idx_jobs_claimable, and the fix suggested below reads it
// through idx_jobs_claimable and idx_jobs_leased (checked).
func TestLagScrapeReadsOnlyOpenJobs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	super, streamer := pools(t)
	exec(t, super, `INSERT INTO webhook_ingress.subscriptions (handler) VALUES ('billing')`)
	exec(t, super, `INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, raw_body, signature_verified)
		SELECT 'stripe', 'stripe', 'evt_' || g, '{}', true FROM generate_series(1, 20000) g`)
	exec(t, super, `UPDATE webhook_ingress.jobs SET status = 'completed', completed_at = now() WHERE id % 1000 <> 0`)
	exec(t, super, `ANALYZE webhook_ingress.jobs`)
	// The partition that holds the jobs (the empty ones are scanned
	// whichever way: nothing to read).
	var part string
	if err := super.QueryRow(ctx, `SELECT DISTINCT tableoid::regclass::text FROM webhook_ingress.jobs`).Scan(&part); err != nil {
		t.Fatal(err)
	}
	part = strings.TrimPrefix(part, "webhook_ingress.")
	var plan []string
	err := pgx.BeginFunc(ctx, streamer, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, "EXPLAIN (COSTS OFF) "+queries.MonitorLag)
		if err != nil {
			return err
		}
		plan, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if p := strings.Join(plan, "\n"); strings.Contains(p, "Seq Scan on "+part+" ") {
		t.Errorf("MonitorLag (every /metrics scrape) reads the finished jobs of %s (19980 completed, 20 open); plan:\n%s", part, p)
	}
}

// TestDashboardLagMatchesTheMetricDuringAConsumerOutage
//
// Regression test (review helper-102; fixed: the text describes the behaviour
// before the fix). 61879cb redefined the lag (inlet_handler_lag_seconds, MonitorLag)
// as the age of the oldest UNDELIVERED due job, leased ones included, so
// that a consumer outage (jobs leased, reaped, leased again…) shows. The
// dashboard's handler table reads its "lag" column from DashboardHandlers
// (schema/queries/dashboard.sql:68), which still takes only pending and
// failed jobs: with the handler's jobs leased (the streamer leases them
// though no consumer takes them) the dashboard shows "—" (no lag) while
// the metric, and the alert on it, say 2h. During the outage the column
// flips between "—" and "2h" with every lease/reap cycle: the two places
// docs/operations.md sends an operator to disagree on the same state.
//
// Expected: DashboardHandlers reports has_lag = true and ~7200s for the
// job leased again 2h after it became due, as inlet_handler_lag_seconds
// does.
func TestDashboardLagMatchesTheMetricDuringAConsumerOutage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	super, streamer, reg := jobDueTwoHours(t)
	// The streamer leases it (no consumer of billing is alive; it will be
	// reaped and leased again, keeping its due time).
	rows, err := queries.New(streamer).ClaimJobs(ctx, queries.ClaimJobsParams{FullHandlers: []string{}, BatchSize: 10, LeaseHolder: "streamer-1", LeaseFor: time.Minute})
	if err != nil || len(rows) != 1 {
		t.Fatalf("precondition: claimed %d, %v; want 1", len(rows), err)
	}

	metric := handlerLag(t, reg, "billing")
	if metric < 7190 {
		t.Fatalf("precondition: inlet_handler_lag_seconds = %vs, want about 7200s", metric)
	}
	var now time.Time
	if err := super.QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
		t.Fatal(err)
	}
	hs, err := queries.New(super).DashboardHandlers(ctx, queries.DashboardHandlersParams{Now: now, FailuresSince: now.Add(-time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range hs {
		if h.Handler != "billing" {
			continue
		}
		if !h.HasLag || h.LagSeconds < 7190 {
			t.Errorf("dashboard lag of billing: has_lag=%v lag=%.0fs (leased %d); inlet_handler_lag_seconds says %.0fs for the same job, undelivered 2h after it became due",
				h.HasLag, h.LagSeconds, h.Leased, metric)
		}
		return
	}
	t.Fatal("no dashboard row for billing")
}
