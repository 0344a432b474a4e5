package monitor_test

import (
	"context"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/schema/queries"
)

// TestLagSurvivesAConsumerGiveBack
//
// Regression test (review helper-104; fixed in 052: the text describes the
// behaviour before the fix). 2263fbb made every lease give-back keep its job's due time
// ("a lease reaped or given back keeps its job's due time", CHANGELOG; the
// MonitorLag comment in schema/queries/monitor.sql) — but only for the
// streamer's ReleaseJobs and ReleaseUnseenJobs. The consumer's give-back,
// webhook_ingress.give_back_attempt (GiveBackAttempt; run by
// consumers.giveBackUnstarted / giveBack on every Stop that cuts references
// or attempts short, i.e. every restart of a consumer behind a backlog),
// still sets `next_attempt_at = now()`
// (schema/migrations/038_consumer_role_scopes.up.sql:270, first in
// 029_give_back_attempt.up.sql:61). review helper-102 named it explicitly
// ("and likewise ReleaseUnseenJobs and give_back_attempt") and it was left
// out. A job undelivered for 2h then reports inlet_handler_lag_seconds ≈ 0
// (and the dashboard's lag, which reads the same column) after each
// consumer restart / crash-loop: the lag alert resets exactly during a
// consumer incident.
//
// Expected: after GiveBackAttempt the lag of a job due for 2h is still
// ≥ 2h, as after ReleaseJobs (TestLagSurvivesABusOutage).
func TestLagSurvivesAConsumerGiveBack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	super, streamer, reg := jobDueTwoHours(t)
	rows, err := queries.New(streamer).ClaimJobs(ctx, queries.ClaimJobsParams{FullHandlers: []string{}, BatchSize: 10, LeaseHolder: "streamer-1", LeaseFor: time.Minute})
	if err != nil || len(rows) != 1 {
		t.Fatalf("precondition: claimed %d, %v; want 1", len(rows), err)
	}
	// A consumer stopping before the reference started gives the lease back
	// (consumers.giveBackUnstarted → GiveBackAttempt).
	given, err := queries.New(super).GiveBackAttempt(ctx, queries.GiveBackAttemptParams{JobID: rows[0].ID,
		EventReceivedAt: rows[0].EventReceivedAt, Attempt: rows[0].AttemptCount, LeasedAt: rows[0].AttemptedAt})
	if err != nil || !given {
		t.Fatalf("precondition: GiveBackAttempt = %v, %v; want given back", given, err)
	}
	if l := handlerLag(t, reg, "billing"); l < 7190 {
		t.Errorf("inlet_handler_lag_seconds{handler=billing} = %.1fs after a consumer gave the lease back; the job is still undelivered "+
			"2h after it became due, want ≥ 7200s (give_back_attempt's next_attempt_at = now() reset it)", l)
	}
}
