package tests

import (
	"context"
	"testing"

	"github.com/inlet-dev/inlet/schema"
)

// TestWorkerRegistrationKeepsScopedRoleSubscription (review helper-173, fixed; this describes the code before the fix):
// 066 makes a handler shared by a scoped role and webhook_worker a
// routed, supported set-up (docs/operations.md "A database role per
// consumer"; TestScopedRoleBesideWorkerLeavesWorkersJobs: team A, scope
// stripe, beside the platform's webhook_worker consumers taking the other
// sources). But each start of the platform's consumer switches team A's
// subscription off: Register's DisableOtherSubscriptions
// (schema/queries/subscriptions.sql:21-27) keeps another role's rows only
// outside the registrant's scopes (in_registrant_scope, 046), and an
// unrestricted role's "scope" is everything (046_registration_scope.up.sql:19:
// NOT EXISTS scopes → true). So team A's stripe/* row is disabled as "no
// longer declared", and from then on team A's stripe events create no job
// of the handler at all (no lease expiry, no dead letter: silently
// unrouted) until team A's consumer happens to restart. The routing of
// e7290ba never gets a team A job to route. (The known limit of
// consumers/known_limits_registration_test.go is about consumers of a
// version before 046; this is the current SDK as webhook_worker.)
//
// Now: registering as webhook_worker does not switch off the rows of
// a scoped role that shares the handler (as 046 already guarantees between
// two scoped roles); team A's stripe event gets its job.
func TestWorkerRegistrationKeepsScopedRoleSubscription(t *testing.T) {
	rr := newReviewRouting(t)
	a := rr.role(t, "a", "stripe")
	rr.service(t, "team-a", rr.p.pool(t, a, 8), "team-a", "stripe")
	rr.service(t, "platform", rr.p.pool(t, schema.WorkerRole, 8), "platform", "github")

	ctx := context.Background()
	var enabled bool
	if err := rr.p.admin.QueryRow(ctx, `SELECT coalesce(bool_or(enabled), false) FROM webhook_ingress.subscriptions
		WHERE handler = 'shared' AND provider_pattern = 'stripe'`).Scan(&enabled); err != nil {
		t.Fatal(err)
	}
	rr.insert(t, "afterplatform", 1, "stripe")
	var jobs int
	if err := rr.p.admin.QueryRow(ctx, `SELECT count(*) FROM webhook_ingress.jobs j JOIN webhook_ingress.events e ON e.id = j.event_id
		WHERE j.handler = 'shared' AND e.provider = 'stripe'`).Scan(&jobs); err != nil {
		t.Fatal(err)
	}
	if !enabled || jobs != 1 {
		t.Errorf("after the platform's webhook_worker consumer of handler shared started: team A's subscription (stripe/*) enabled=%v, "+
			"jobs of a new stripe event=%d; want enabled and 1 (team A's events silently get no job until team A restarts)", enabled, jobs)
	}
}
