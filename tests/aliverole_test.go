package tests

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/consumers"
	"github.com/inlet-dev/inlet/internal/testwait"
	"github.com/inlet-dev/inlet/schema/queries"
	"github.com/inlet-dev/inlet/streamer"
)

// TestRemovingOneHandlerFromARoleKeepsItsOtherHandlersAlive (review helper-211;
// this describes the code before the fix).
//
// Defect: a running consumer service of scoped role A runs handlers "keep"
// and "moved". The operator takes "moved" away from the role (inlet roles
// create-consumer A --handlers keep: create_consumer_role deletes the
// consumer_roles row), e.g. to hand it to another team, before A's team
// redeploys without it. From then on every liveness write of the service
// fails: ConsumerAlive (schema/queries/jobs.sql, "name: ConsumerAlive";
// consumers/alive.go sayAlive) upserts the rows of ALL the service's
// handlers in one INSERT ... ON CONFLICT, and the row for "moved" violates
// 011's consumer_own_handlers WITH CHECK, so the whole statement fails and
// the row of "keep" is not refreshed either (a warning "record consumer
// liveness failed" every AliveInterval is all that shows). Three
// AliveIntervals later the streamers take the service for gone: nothing of
// "keep" is leased any more (its only consumer is "quiet"), and the reaper
// gives back any lease of it uncounted — a silent, total outage of a handler
// the role still has, while its consumer process runs and reports ready.
//
// Expected: the handlers the role still has stay alive (their jobs are
// delivered); only "moved" stops. Observed: a "keep" job inserted after the
// change is never leased (pending, attempted_at NULL) and the service's row
// of "keep" has alive_until in the past.
//
// Control (run while writing this test): without the role change the same
// job completes in well under a second.
//
// Fixed: a consumer of a scoped role says ConsumerAliveScoped, which writes
// only the handlers consumer_roles still gives the role and returns those it
// wrote; the service logs once which handlers it no longer may run. This
// test failed before the fix (the job of "keep" never leased) and passes
// after it.
func TestRemovingOneHandlerFromARoleKeepsItsOtherHandlersAlive(t *testing.T) {
	p := newPipeline(t)
	ctx := context.Background()
	role := fmt.Sprintf("webhook_consumer_rv%d_%d_alive", os.Getpid(), sharedRoleSeq.Add(1))
	q := queries.New(p.admin)
	if _, err := q.CreateConsumerRole(ctx, queries.CreateConsumerRoleParams{Role: role,
		Handlers: []string{"keep", "moved"}, ScopeProviders: []string{"stripe"}, ScopeTypes: []string{"*"}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := q.DropConsumerRole(context.Background(), role); err != nil {
			t.Errorf("drop role %s: %v", role, err)
		}
	})
	var ran atomic.Int64
	fn := func(context.Context, *consumers.Event) error { ran.Add(1); return nil }
	svc, err := consumers.New(consumers.Config{
		Pool: p.pool(t, role, 8), Subscriber: p.bus, WorkerID: "team-a", Logger: p.quiet,
		AliveInterval: 200 * time.Millisecond,
		Handlers: []consumers.Handler{
			{Name: "keep", Provider: "stripe", Func: fn},
			{Name: "moved", Provider: "stripe", Func: fn},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = svc.Stop(sctx)
	})
	p.startStreamer(t, streamer.Config{ID: "s1", LeaseDuration: 2 * time.Second, PollInterval: 50 * time.Millisecond,
		ReapInterval: 100 * time.Millisecond})

	// The operator takes "moved" away from the role (scopes kept).
	if _, err := q.CreateConsumerRole(ctx, queries.CreateConsumerRoleParams{Role: role, Handlers: []string{"keep"}}); err != nil {
		t.Fatal(err)
	}
	// Past three AliveIntervals: the liveness of the last write before the
	// change has run out unless a later write succeeded.
	var changedAt time.Time
	if err := p.admin.QueryRow(ctx, `SELECT now()`).Scan(&changedAt); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)

	if _, err := p.admin.Exec(ctx, `INSERT INTO webhook_ingress.events
		(provider, scheme, external_event_id, event_type, raw_body, signature_verified)
		VALUES ('stripe', 'stripe', 'evt_review_keep', 'x', '{}', true)`); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, 10*time.Second, `the job of handler "keep" (still given to the role) completed by the running consumer`, func() (bool, string) {
		var status string
		var attempted *time.Time
		var aliveUntil, seenAt time.Time
		err := p.admin.QueryRow(ctx, `SELECT j.status::text, j.attempted_at, c.alive_until, c.seen_at
			FROM webhook_ingress.jobs j JOIN webhook_ingress.consumers c ON c.handler = j.handler AND c.worker_id = 'team-a'
			WHERE j.handler = 'keep'`).Scan(&status, &attempted, &aliveUntil, &seenAt)
		if err != nil {
			return false, err.Error()
		}
		return status == "completed", fmt.Sprintf("job %s (attempted_at %v); the consumer's row of keep: last seen %s after the change, alive_until %s after it",
			status, attempted, seenAt.Sub(changedAt).Round(time.Millisecond), aliveUntil.Sub(changedAt).Round(time.Millisecond))
	})
}
