package consumers_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/consumers"
	"github.com/inlet-dev/inlet/consumers/internal/consumertest"
	"github.com/inlet-dev/inlet/internal/testwait"
	"github.com/inlet-dev/inlet/schema/queries"
)

// A handler runs only once this consumer was seen after its lease began, so
// the reaper counts the attempt if the process dies in the handler.
//
// Regression test (review helper-211; this describes the code before the
// fix). ReapExpiredLeases counts an expired lease its consumer did not
// extend only when a consumer of the handler has seen_at >= the lease's
// attempted_at. The consumer wrote its liveness at Start and every
// AliveInterval, never on taking an attempt, so a handler started within an
// AliveInterval of the last write ran with that write before its lease: a
// poison job that killed its process every time was given back uncounted at
// every restart, and never dead-lettered. Here (AliveInterval a minute, the
// lease too long to be extended at take) the handler ran with the
// consumer's seen_at before the lease's attempted_at; it failed before the
// fix and passes after it.
func TestHandlerRunsOnlyOnceItsConsumerWasSeenAfterTheLease(t *testing.T) {
	t.Parallel()
	b := setup(t)
	type seen struct{ seenAt, attemptedAt time.Time }
	calls := make(chan seen, 4)
	cfg := b.config(consumers.Handler{Name: "seen", Func: func(hctx context.Context, ev *consumers.Event) error {
		var s seen
		err := b.Admin.QueryRow(hctx, `SELECT c.seen_at, j.attempted_at
			FROM webhook_ingress.jobs j JOIN webhook_ingress.consumers c ON c.handler = j.handler
			WHERE j.id = $1 AND c.worker_id = 'test-worker'`, ev.JobID).Scan(&s.seenAt, &s.attemptedAt)
		if err != nil {
			t.Errorf("read the consumer's liveness in the handler: %v", err)
		}
		calls <- s
		return nil
	}})
	cfg.AliveInterval = time.Minute // no periodic write during the test
	b.start(t, cfg)
	b.StartStreamer(t, consumertest.StreamerOptions{Lease: time.Minute})

	// Two jobs one after the other: the second lease begins after the
	// write the first one caused, and needs its own.
	for i := range 2 {
		jobID := b.JobID(t, b.InsertEvent(t, consumertest.EventParams{}), "seen")
		var s seen
		select {
		case s = <-calls:
		case <-time.After(wait):
			t.Fatalf("job %d: handler never called", i+1)
		}
		if s.seenAt.Before(s.attemptedAt) {
			t.Errorf("job %d ran with its consumer last seen at %s, %s before its lease began (%s): the reaper would give the attempt back uncounted if the process died in the handler",
				i+1, s.seenAt.Format(time.RFC3339Nano), s.attemptedAt.Sub(s.seenAt), s.attemptedAt.Format(time.RFC3339Nano))
		}
		b.WaitJobStatus(t, jobID, "completed", wait)
	}
}

// A service whose scoped role loses one of its handlers keeps saying the
// others are alive, and says once which one it no longer may run.
//
// Regression test (review helper-211; this describes the code before the
// fix). ConsumerAlive upserted the rows of all the service's handlers in one
// statement; once an operator took one handler away from the role
// (create_consumer_role with the others), 011's consumer_own_handlers policy
// refused the row of that one, the whole statement failed every
// AliveInterval, and the liveness of the handlers the role kept ran out:
// streamers leased none of their jobs. Here the row of the kept handler was
// never seen after the change; it failed before the fix and passes after.
func TestRoleLosingAHandlerKeepsItsOtherHandlersAlive(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	cfg := consumerRolePool(t, b, "kept", "taken")
	noop := func(context.Context, *consumers.Event) error { return nil }
	cfg.Handlers = []consumers.Handler{{Name: "kept", Func: noop}, {Name: "taken", Func: noop}}
	cfg.AliveInterval = 50 * time.Millisecond
	b.start(t, *cfg)
	var role string
	if err := cfg.Pool.QueryRow(ctx, `SELECT current_user`).Scan(&role); err != nil {
		t.Fatal(err)
	}

	if _, err := queries.New(b.Admin).CreateConsumerRole(ctx, queries.CreateConsumerRoleParams{Role: role, Handlers: []string{"kept"}}); err != nil {
		t.Fatal(err)
	}
	var changed time.Time
	if err := b.Admin.QueryRow(ctx, `SELECT now()`).Scan(&changed); err != nil {
		t.Fatal(err)
	}
	// Several liveness writes after the change, each of them seen.
	testwait.Eventually(t, wait, `the consumer's row of "kept" seen 10 AliveIntervals after the role lost "taken"`, func() (bool, string) {
		var seen time.Time
		err := b.Admin.QueryRow(ctx, `SELECT seen_at FROM webhook_ingress.consumers
			WHERE handler = 'kept' AND worker_id = 'test-worker'`).Scan(&seen)
		if err != nil {
			return false, err.Error()
		}
		return seen.Sub(changed) > 10*cfg.AliveInterval, fmt.Sprintf("last seen %s after the change", seen.Sub(changed))
	})
	const msg = "handlers no longer given to this consumer's database role"
	if n := strings.Count(b.logs.String(), msg); n != 1 {
		t.Errorf("%q logged %d times over 10 liveness writes; want once", msg, n)
	}
	if !strings.Contains(b.logs.String(), `"handlers":["taken"]`) {
		t.Errorf(`the log does not name the handler taken away ("handlers":["taken"])`)
	}
}
