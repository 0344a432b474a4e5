package consumers_test

import (
	"context"
	"strings"
	"testing"

	"github.com/inlet-dev/inlet/consumers"
)

// TestSharedHandlerLimitsSurviveAnotherRolesRegistration (review helper-331, fixed).
// Defect: a handler shared by two scoped consumer roles (a documented setup,
// docs/operations.md "A database role per consumer") has one
// handler_limits row, and every registration rewrites it whole: a role
// whose consumer declares no limits DELETEs the row
// (consumers/register.go:registerLimits → DeleteHandlerLimits), which the
// RLS policy consumer_own_handlers allows since the handler is also that
// role's. Team A's rate limit, max_in_flight and circuit breaker vanish,
// an OPEN circuit included, the moment team B's consumer (re)starts, and
// every streamer then claims the handler unlimited (claim_jobs no longer
// holds it back): A's fragile downstream, which the open circuit was
// shielding, gets the whole backlog. Migration 067 stopped a role's
// registration from switching off another role's subscription rows, but
// the limits row is still last-writer-wins.
// Setup: handler "shared" given to role A (scope stripe) and role B (scope
// github); A registers RateLimit 2, MaxInFlight 1, BreakerFailures 3 and
// its circuit is open (as after 3 failures); B registers the handler
// without limits.
// Expected: A's limits and its open circuit kept (B cannot speak for A's
// jobs), or B's start refused/warned about conflicting limits.
// Observed: the handler_limits row is gone (0 rows): no rate limit, no
// in-flight limit, circuit closed for every role's jobs.
// Fixed: registerLimits asks HandlerLimitsShared (080 another_role_given,
// as 067's another_role_may_own for subscription rows) and, for a handler
// another role is given, never removes what it does not declare: no limits
// declared leaves the row (warned once), limits declared write only their
// kinds (UpsertSharedHandlerLimits, last writer wins per kind), so the
// circuit is kept; a restrictive DELETE policy (080) holds the same for
// consumers of the previous version.
func TestSharedHandlerLimitsSurviveAnotherRolesRegistration(t *testing.T) {
	b := setup(t)
	ctx := context.Background()

	cfgA := scopedRolePool(t, b, "stripe", "shared")
	cfgA.Handlers = []consumers.Handler{{Name: "shared", Provider: "stripe", Func: ok,
		RateLimit: 2, MaxInFlight: 1, BreakerFailures: 3}}
	svcA, err := consumers.New(*cfgA)
	if err != nil {
		t.Fatal(err)
	}
	if err := svcA.Register(ctx); err != nil {
		t.Fatal(err)
	}
	// A's downstream failed three times: its circuit is open.
	if _, err := b.Admin.Exec(ctx, `UPDATE webhook_ingress.handler_limits
		SET consecutive_failures = 3, circuit = 'open', circuit_changed_at = now(), next_probe_at = now() + interval '30 seconds'
		WHERE handler = 'shared'`); err != nil {
		t.Fatal(err)
	}

	cfgB := scopedRolePool(t, b, "github", "shared")
	cfgB.Handlers = []consumers.Handler{{Name: "shared", Provider: "github", Func: ok}}
	svcB, err := consumers.New(*cfgB)
	if err != nil {
		t.Fatal(err)
	}
	if err := svcB.Register(ctx); err != nil {
		t.Fatal(err)
	}

	var rows int
	var circuit, rate, inFlight string
	if err := b.Admin.QueryRow(ctx, `SELECT count(*), coalesce(max(circuit), '-'), coalesce(max(rate_per_second)::text, '-'),
		coalesce(max(max_in_flight)::text, '-') FROM webhook_ingress.handler_limits WHERE handler = 'shared'`).Scan(&rows, &circuit, &rate, &inFlight); err != nil {
		t.Fatal(err)
	}
	if rows != 1 || circuit != "open" || rate != "2" || inFlight != "1" {
		t.Errorf("after role B (scope github, no limits declared) registered the shared handler, its handler_limits rows: %d (circuit %s, rate %s, max_in_flight %s); "+
			"want role A's row kept: rate 2, max_in_flight 1, circuit open", rows, circuit, rate, inFlight)
	}
}

// sharedLimitsRow is the handler_limits row of handler, as the tests read
// it ('-' for NULL, rows 0 when there is none).
type sharedLimitsRow struct {
	rows                              int
	circuit, rate, inFlight, failures string
	nextProbe                         string
}

func readSharedLimits(t *testing.T, b *testBundle, handler string) sharedLimitsRow {
	t.Helper()
	var r sharedLimitsRow
	if err := b.Admin.QueryRow(context.Background(), `SELECT count(*), coalesce(max(circuit), '-'),
		coalesce(max(rate_per_second)::text, '-'), coalesce(max(max_in_flight)::text, '-'),
		coalesce(max(breaker_failures)::text, '-'), coalesce(max(next_probe_at)::text, '-')
		FROM webhook_ingress.handler_limits WHERE handler = $1`, handler).Scan(&r.rows, &r.circuit, &r.rate, &r.inFlight, &r.failures, &r.nextProbe); err != nil {
		t.Fatal(err)
	}
	return r
}

// registerShared registers cfg's handlers, as a service's start does.
func registerShared(t *testing.T, cfg consumers.Config) {
	t.Helper()
	svc, err := consumers.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Register(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// openSharedCircuit opens handler's circuit, as after its breaker's
// failures.
func openSharedCircuit(t *testing.T, b *testBundle, handler string) {
	t.Helper()
	if _, err := b.Admin.Exec(context.Background(), `UPDATE webhook_ingress.handler_limits
		SET consecutive_failures = 3, circuit = 'open', circuit_changed_at = now(), next_probe_at = now() + interval '30 seconds'
		WHERE handler = $1`, handler); err != nil {
		t.Fatal(err)
	}
}

// A role declaring some limits of a handler another role is given writes
// those (the last registration wins) and keeps the kinds it does not
// declare: the other role's in-flight limit and breaker, and its open
// circuit with its next probe. Each registration that changes a shared
// row, and each that leaves one declaring none, is warned about once.
func TestSharedHandlerLimitsKeepUndeclaredKinds(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const handler = "shared_kinds"
	cfgA := scopedRolePool(t, b, "stripe", handler)
	cfgA.Handlers = []consumers.Handler{{Name: handler, Provider: "stripe", Func: ok,
		RateLimit: 2, MaxInFlight: 1, BreakerFailures: 3}}
	registerShared(t, *cfgA)
	openSharedCircuit(t, b, handler)
	before := readSharedLimits(t, b, handler)

	cfgB := scopedRolePool(t, b, "github", handler)
	cfgB.Handlers = []consumers.Handler{{Name: handler, Provider: "github", Func: ok, RateLimit: 5}}
	registerShared(t, *cfgB)
	got := readSharedLimits(t, b, handler)
	want := sharedLimitsRow{rows: 1, circuit: "open", rate: "5", inFlight: "1", failures: "3", nextProbe: before.nextProbe}
	if got != want {
		t.Errorf("after role B declared only a rate limit of the shared handler: %+v; want %+v (B's rate, A's in-flight limit, breaker and open circuit kept)", got, want)
	}
	if n := strings.Count(b.logs.String(), "limits of a shared handler changed by this registration"); n != 1 {
		t.Errorf("%d warnings that B's registration changed the shared handler's limits; want 1", n)
	}

	// Registered again unchanged: nothing written, nothing warned.
	registerShared(t, *cfgB)
	if n := strings.Count(b.logs.String(), "limits of a shared handler changed by this registration"); n != 1 {
		t.Errorf("%d warnings after B registered the same limits again; want still 1", n)
	}

	cfgB.Handlers = []consumers.Handler{{Name: handler, Provider: "github", Func: ok}}
	registerShared(t, *cfgB)
	if got := readSharedLimits(t, b, handler); got != want {
		t.Errorf("after role B declared no limits of the shared handler: %+v; want %+v", got, want)
	}
	if n := strings.Count(b.logs.String(), "limits of a shared handler left as another database role's registration set them"); n != 1 {
		t.Errorf("%d warnings that B's registration left the shared handler's limits; want 1", n)
	}
}

// webhook_worker's registration of a handler a scoped role is also given,
// declaring no limits, leaves the row as the role's registration set it
// (as 067 leaves that role's subscription rows); a handler given to one role
// only loses its row when that role declares no limits, as before.
func TestHandlerLimitsRemovedOnlyWhenNotShared(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const handler = "shared_with_worker"
	cfgA := scopedRolePool(t, b, "stripe", handler)
	cfgA.Handlers = []consumers.Handler{{Name: handler, Provider: "stripe", Func: ok, MaxInFlight: 2, BreakerFailures: 3}}
	registerShared(t, *cfgA)
	openSharedCircuit(t, b, handler)

	registerShared(t, b.config(consumers.Handler{Name: handler, Provider: "github", Func: ok}))
	if got := readSharedLimits(t, b, handler); got.rows != 1 || got.circuit != "open" || got.inFlight != "2" {
		t.Errorf("after webhook_worker registered the handler without limits: %+v; want role A's row kept (max_in_flight 2, circuit open)", got)
	}

	// Role A alone is given the handler: its registration without limits
	// removes them.
	cfgA.Handlers = []consumers.Handler{{Name: handler, Provider: "stripe", Func: ok}}
	registerShared(t, *cfgA)
	if got := readSharedLimits(t, b, handler); got.rows != 0 {
		t.Errorf("after role A, alone given the handler, registered it without limits: %+v; want no row", got)
	}
}

// A consumer of the previous version deletes the row of a handler it
// declares without limits with no question asked: 080's policy lets no
// consumer role delete the row of a handler another role is given.
func TestSharedHandlerLimitsRowNotDeletedByAnotherRole(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	const handler = "shared_policy"
	cfgA := scopedRolePool(t, b, "stripe", handler)
	cfgA.Handlers = []consumers.Handler{{Name: handler, Provider: "stripe", Func: ok, RateLimit: 2}}
	registerShared(t, *cfgA)
	cfgB := scopedRolePool(t, b, "github", handler)

	tag, err := cfgB.Pool.Exec(ctx, `DELETE FROM webhook_ingress.handler_limits WHERE handler = $1`, handler)
	if err != nil {
		t.Fatal(err)
	}
	if n := tag.RowsAffected(); n != 0 || readSharedLimits(t, b, handler).rows != 1 {
		t.Errorf("role B deleted %d handler_limits rows of the handler role A is also given; want 0, A's row kept", n)
	}
}
