package schema_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/internal/pgtest"
	"github.com/inlet-dev/inlet/schema/queries"
)

// TestSharedHandlerResetKeepsTheOtherRolesFailures (review helper-139, fixed by
// 059; this describes the code before the fix):
//
// Before the fix: a circuit breaker of a handler shared by two consumer roles of
// different scopes (supported: docs/operations.md, 038, 046,
// consumers TestSharedHandlerRegistrationKeepsOtherRolesSubscription) is
// closed, and its count of consecutive failures zeroed, by one role's late
// breaker reset although the other role's failures came after that role's
// success. HandlerSucceeded (schema/queries/limits.sql) recounts "the
// failures recorded since" the success from job_attempts JOIN jobs, and it
// runs as the consumer's own role: row-level security (011
// consumer_own_handlers, 038 consumer_in_scope on jobs; job_attempts follow)
// hides every failure of the other role's scope, so the recount is 0 and the
// circuit the other role's failures opened closes again, with nothing
// having succeeded since. docs/pipeline.md: "a success counts the failures
// recorded since it began, so one whose reset lands after later failures
// keeps them" (TestBreakerResetAfterLaterFailuresKeepsThem proves it for
// webhook_worker only).
//
// Here (breaker_failures 2, handler "shared" run by role A, scope stripe,
// and role B, scope github): A's stripe job succeeds; then two of B's
// github jobs fail (counted: 2, the circuit opens); then A's reset for its
// success lands (the consumer runs it off the completion writer, after the
// commit, waiting for the handler_limits row a streamer's claim may hold).
//
// Now: open, 2 consecutive failures (as with webhook_worker).
// Before: closed, 0: the handler's jobs are leased again at full speed into
// the downstream that just failed.
func TestSharedHandlerResetKeepsTheOtherRolesFailures(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	for _, p := range []string{"stripe", "github"} {
		if _, err := pool.Exec(ctx, `INSERT INTO webhook_ingress.subscriptions (handler, provider_pattern) VALUES ('shared', $1)`, p); err != nil {
			t.Fatal(err)
		}
	}
	failures, interval := int32(2), time.Hour
	if _, err := queries.New(pool).UpsertHandlerLimits(ctx, queries.UpsertHandlerLimitsParams{Handler: "shared",
		BreakerFailures: &failures, BreakerProbeInterval: &interval}); err != nil {
		t.Fatal(err)
	}
	roleA := newScopedConsumerRole(t, pool, [][2]string{{"stripe", "*"}}, "shared")
	roleB := newScopedConsumerRole(t, pool, [][2]string{{"github", "*"}}, "shared")
	if _, err := pool.Exec(ctx, `INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, raw_body, signature_verified)
		VALUES ('stripe', 'stripe', 'evt_s1', '{}', true), ('github', 'github', 'evt_g1', '{}', true), ('github', 'github', 'evt_g2', '{}', true)`); err != nil {
		t.Fatal(err)
	}
	jobs := claimLimitedAs(t, pool, "shared")
	if len(jobs) != 3 {
		t.Fatalf("claimed %d of 3 jobs", len(jobs))
	}
	var ok queries.ClaimLimitedJobsRow
	var bad []queries.ClaimLimitedJobsRow
	for _, j := range jobs {
		if j.Provider == "stripe" {
			ok = j
		} else {
			bad = append(bad, j)
		}
	}

	// Role A's success commits.
	if err := asRoleCommit(t, pool, roleA, func(tx pgx.Tx) error {
		done, err := queries.New(tx).CompleteJobs(ctx, queries.CompleteJobsParams{Column1: []int64{ok.ID}, Column2: []int32{ok.AttemptCount},
			Column3: []time.Time{ok.EventReceivedAt}, Column4: []time.Time{ok.AttemptedAt}, Column5: "consumer-a"})
		if err == nil && len(done) != 1 {
			err = errors.New("not completed")
		}
		return err
	}); err != nil {
		t.Fatalf("role A completes its job: %v", err)
	}
	// Role B's two failures, each after it: the circuit opens.
	for _, j := range bad {
		if err := asRoleCommit(t, pool, roleB, func(tx pgx.Tx) error {
			if err := breakerRecordFailure(ctx, tx, j); err != nil {
				return err
			}
			_, err := queries.New(tx).HandlerFailed(ctx, "shared")
			return err
		}); err != nil {
			t.Fatalf("role B records a failure of job %d: %v", j.ID, err)
		}
	}
	if c, n := breakerState(t, pool, "shared"); c != "open" || n != 2 {
		t.Fatalf("after role B's 2 failures: circuit %s, %d failures; want open, 2", c, n)
	}

	// Role A's reset for its (earlier) success lands now, as its consumer
	// runs it (consumers.Service.reset).
	var r queries.HandlerSucceededRow
	if err := asRoleCommit(t, pool, roleA, func(tx pgx.Tx) error {
		q := queries.New(tx)
		if err := q.LockHandlerLimits(ctx, "shared"); err != nil {
			return err
		}
		var err error
		r, err = q.HandlerSucceeded(ctx, queries.HandlerSucceededParams{JobID: ok.ID, EventReceivedAt: ok.EventReceivedAt, Handler: "shared"})
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		return err
	}); err != nil {
		t.Fatalf("role A's reset: %v", err)
	}
	if c, n := breakerState(t, pool, "shared"); c != "open" || n != 2 {
		t.Fatalf("role A's reset for a success before role B's 2 failures, landing after them: circuit %s (was %q, now %q), %d consecutive failures; "+
			"want open, 2 (nothing succeeded since; run as webhook_worker the same reset keeps them): the recount runs under role A's row-level security and misses role B's failures",
			c, r.Was, r.Now, n)
	}
}

// handler_failures_since (059) counts every role's failures of a handler, as
// its owner: a consumer role gets the count of its own handlers only.
func TestHandlerFailuresSinceIsOwnHandlersOnly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	if _, err := pool.Exec(ctx, `INSERT INTO webhook_ingress.subscriptions (handler, provider_pattern) VALUES ('mine', 'stripe'), ('theirs', 'stripe')`); err != nil {
		t.Fatal(err)
	}
	role := newScopedConsumerRole(t, pool, [][2]string{{"stripe", "*"}}, "mine")
	count := func(handler string) error {
		return asRoleCommit(t, pool, role, func(tx pgx.Tx) error {
			var n int32
			return tx.QueryRow(ctx, `SELECT webhook_ingress.handler_failures_since($1, '-infinity')`, handler).Scan(&n)
		})
	}
	if err := count("mine"); err != nil {
		t.Fatalf("its own handler: %v", err)
	}
	if err := count("theirs"); err == nil || !strings.Contains(err.Error(), "not one of role") {
		t.Fatalf("another role's handler: %v; want refused", err)
	}
}
