package tests

import (
	"context"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/inlet-dev/inlet/consumers"
	"github.com/inlet-dev/inlet/consumers/bus"
	"github.com/inlet-dev/inlet/streamer"
)

// oldSubscriber is the bus as a consumer of the version before 064 reads it:
// the handler's own topic only (it knows no role topics).
type oldSubscriber struct {
	message.Subscriber
	handler string
}

func (s oldSubscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	if topic == bus.Topic(s.handler) {
		return s.Subscriber.Subscribe(ctx, topic)
	}
	ch := make(chan *message.Message)
	go func() { <-ctx.Done(); close(ch) }()
	return ch, nil
}

// TestRollingUpgradeRoutesAwayFromOldConsumers (review helper-205; this describes the code before the fix).
//
// Defect: during the rolling upgrade to 064 (docs/pipeline.md "Upgrading
// from the previous protocol": "a handler shared by roles is published per
// role ... only once every role's consumers say theirs ... nothing to
// drain"), ListJobRoutes (schema/queries/jobs.sql, "name: ListJobRoutes")
// routes a shared handler as soon as ONE consumer of each of two roles has
// said its role in the last day, whatever the handler's consumers of the
// previous version (db_role NULL, which read only inlet.jobs.HANDLER) that
// are alive. Here team B (github) is upgraded; team A (stripe) started one
// new consumer, which stopped again (a new pod that crashed, or a rollout
// undone), and A's consumer of the previous version runs on. The streamer
// publishes every stripe job on inlet.jobs.shared.<A> (the only route
// covering stripe, though no consumer saying A is alive: streamer/routes.go
// topicOf), which the running old A consumer never reads; each lease expires
// and is counted (the handler has live consumers), and the jobs are
// dead-lettered unrun, for up to a day (the stopped row's lifetime), while
// a consumer allowed to run them is up and idle.
//
// Control (run while writing this test): the same setup without team A's
// stopped new consumer passes (every stripe job run by old-a within its 25
// attempts, as before 064); with it, all 5 are dead-lettered lease_expired,
// never run.
//
// Expected: while a live consumer of the handler says no role (a version
// before 064), the handler is published on its own topic as before (or at
// least a job whose only covering role has no live consumer goes to the
// handler's topic); the old A consumer runs every stripe job.
//
// Now: ListJobRoutes does not route a handler while one of its consumers of
// the previous version is alive; the old A consumer runs every stripe job
// (this test failed before the fix: 5 of 5 dead-lettered lease_expired).
func TestRollingUpgradeRoutesAwayFromOldConsumers(t *testing.T) {
	rr := newReviewRouting(t)
	ctx := context.Background()
	a := rr.role(t, "a", "stripe")
	b := rr.role(t, "b", "github")
	// A consumer of the previous version writes no db_role: its liveness
	// statement predates the column.
	if _, err := rr.p.admin.Exec(ctx, `
CREATE FUNCTION public.rv_old_consumer() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN NEW.db_role := NULL; RETURN NEW; END $$;
CREATE TRIGGER rv_old_consumer BEFORE INSERT OR UPDATE ON webhook_ingress.consumers
    FOR EACH ROW WHEN (NEW.worker_id = 'old-a') EXECUTE FUNCTION public.rv_old_consumer();
GRANT EXECUTE ON FUNCTION public.rv_old_consumer() TO PUBLIC;`); err != nil {
		t.Fatal(err)
	}
	// max_attempts 25: as before 064, a reference on the handler's topic
	// may reach team B's consumer, which cannot see a stripe job and lets
	// its lease expire; one of the next attempts reaches team A's.
	start := func(name, role, provider string, sub message.Subscriber) *consumers.Service {
		t.Helper()
		svc, err := consumers.New(consumers.Config{
			Pool: rr.p.pool(t, role, 8), Subscriber: sub, WorkerID: name, Logger: rr.p.quiet,
			AliveInterval: 200 * time.Millisecond,
			Handlers: []consumers.Handler{{Name: "shared", Provider: provider, MaxAttempts: 25, Concurrency: 4,
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
		if err := svc.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = svc.Stop(sctx)
		})
		return svc
	}
	start("team-b", b, "github", rr.p.bus)                         // team B upgraded
	start("old-a", a, "stripe", oldSubscriber{rr.p.bus, "shared"}) // team A's consumer of the previous version
	// Team A's first consumer of the new version starts, says its role,
	// and stops again (a crashed new pod, a rollout undone).
	newA := start("new-a", a, "stripe", rr.p.bus)
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := newA.Stop(sctx); err != nil {
		t.Fatal(err)
	}

	rr.p.startStreamer(t, streamer.Config{ID: "s1", LeaseDuration: time.Second, PollInterval: 50 * time.Millisecond,
		ReapInterval: 100 * time.Millisecond})
	time.Sleep(1500 * time.Millisecond) // past the route table's refresh
	rr.insert(t, "rolling", 5, "stripe")
	rr.check(t, map[string]string{"stripe": "old-a"})
}
