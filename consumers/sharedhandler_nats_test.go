package consumers_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/consumers"
	"github.com/inlet-dev/inlet/consumers/bus"
	"github.com/inlet-dev/inlet/consumers/bus/natsbus"
	"github.com/inlet-dev/inlet/consumers/internal/consumertest"
	"github.com/inlet-dev/inlet/internal/natstest"
	"github.com/inlet-dev/inlet/internal/testwait"
	"github.com/inlet-dev/inlet/schema/queries"
)

// TestSharedHandlerOverNATSReachesTheRoleThatCanTakeIt (review helper-163, fixed; this describes the code before the fix):
// docs/operations.md ("A database role per consumer") supports a
// handler shared by two consumer roles of different scopes (team A: scope
// stripe, team B: scope github, both running handler "shared"; see also
// TestSharedHandlerRegistrationKeepsOtherRolesSubscription). Over NATS both
// teams' consumer services subscribe to the same durable, inlet_shared
// (natsbus.DurableName: the handler name only), so JetStream hands each
// message to either team, and the streamer puts a claim's jobs of one
// handler in one message whatever their source. The team that receives a
// reference to a job its role cannot see (row-level security) finds no row,
// skips it as "not this attempt's to take" (consumers/attempt.go:62) and
// acknowledges the message (consumers/service.go:466). The job's lease then
// expires, the reaper counts the attempt (a consumer of the handler was
// alive), and the job is dead-lettered (lease_expired) although its handler
// was never called, while the team that could run it was up and idle.
// With max_attempts above 1 every such misrouting costs an attempt and a
// lease of latency; the job is dead-lettered unrun whenever every delivery
// lands on the wrong team.
//
// Now: the team that cannot see a job passes its lease on, uncounted
// (PassOnAttempt, 063), and the next claim publishes it again: every job of
// the shared handler reaches a consumer that can take it, both jobs below
// complete, each handler called once.
func TestSharedHandlerOverNATSReachesTheRoleThatCanTakeIt(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	srv := natstest.Start(t)
	newBus := func() *natsbus.NATS {
		n, err := natsbus.New(ctx, natsbus.Config{URL: srv.URL(), AckWait: 5 * time.Second, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { n.Close() })
		return n
	}
	streamerBus := newBus()

	var mu sync.Mutex
	called := map[int64]int{}
	record := func(_ context.Context, e *consumers.Event) error {
		mu.Lock()
		called[e.JobID]++
		mu.Unlock()
		return nil
	}

	// Two teams' consumer services (separate processes: separate
	// connections), each its own role and scope, one shared handler.
	cfgA := scopedRolePool(t, b, "stripe", "shared")
	cfgA.Subscriber = newBus()
	cfgA.WorkerID = "team-a"
	// Said alive within the 2 s lease below, as a service does every 5 s
	// within the default 30 s lease: the reaper then counts the attempt.
	cfgA.AliveInterval = 200 * time.Millisecond
	cfgA.Handlers = []consumers.Handler{{Name: "shared", Provider: "stripe", MaxAttempts: 1, Func: record}}
	cfgB := scopedRolePool(t, b, "github", "shared")
	cfgB.Subscriber = newBus()
	cfgB.WorkerID = "team-b"
	cfgB.AliveInterval = 200 * time.Millisecond
	cfgB.Handlers = []consumers.Handler{{Name: "shared", Provider: "github", MaxAttempts: 1, Func: record}}
	b.start(t, *cfgA)
	b.start(t, *cfgB)

	stripeJob := b.JobID(t, b.InsertEvent(t, consumertest.EventParams{Provider: "stripe", EventType: "invoice.paid", Body: []byte(`{"id":"evt_s"}`)}), "shared")
	githubJob := b.JobID(t, b.InsertEvent(t, consumertest.EventParams{Provider: "github", EventType: "push", Body: []byte(`{"id":"evt_g"}`)}), "shared")

	// A streamer over NATS, as inlet streamer does it: reap, claim, and
	// publish a claim's references of one handler in one message
	// (streamer.refs_per_message 32).
	sctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for sctx.Err() == nil {
			var refs []bus.Ref
			err := consumertest.AsRole(ctx, b.Admin, "webhook_streamer", func(tx pgx.Tx) error {
				if _, err := queries.New(tx).ReapExpiredLeases(ctx, 100); err != nil {
					return err
				}
				rows, err := queries.New(tx).ClaimJobs(ctx, queries.ClaimJobsParams{
					FullHandlers: []string{}, BatchSize: 100, LeaseHolder: "review-streamer", LeaseFor: 2 * time.Second,
				})
				for _, j := range rows {
					refs = append(refs, bus.Ref{JobID: j.ID, EventID: j.EventID, Handler: j.Handler, Provider: j.Provider, EventType: j.EventType,
						Attempt: int(j.AttemptCount), LeaseExpiresAt: j.LeaseExpiresAt, EventReceivedAt: j.EventReceivedAt, LeasedAt: j.AttemptedAt})
				}
				return err
			})
			if err != nil {
				t.Errorf("review streamer: %v", err)
				return
			}
			if len(refs) > 0 {
				msg, err := bus.NewBatchMessage(refs)
				if err == nil {
					err = streamerBus.Publish(bus.Topic("shared"), msg)
				}
				if err != nil {
					t.Errorf("publish: %v", err)
					return
				}
			}
			select {
			case <-sctx.Done():
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(func() { stop(); <-done })

	final := func(id int64) string {
		var s string
		testwait.Eventually(t, 30*time.Second, fmt.Sprintf("job %d finished", id), func() (bool, string) {
			s = b.Job(t, id).Status
			return s == "completed" || s == "dead_letter", s
		})
		return s
	}
	for name, id := range map[string]int64{"stripe (team A's)": stripeJob, "github (team B's)": githubJob} {
		st := final(id)
		j := b.Job(t, id)
		mu.Lock()
		n := called[id]
		mu.Unlock()
		if st != "completed" || n != 1 {
			t.Errorf("%s job %d of the shared handler: status %s (last_error_class %s, %q), handler called %d times; want completed, called once: "+
				"the message went over the shared durable inlet_shared to the other team's service, whose role cannot see the job, "+
				"which skipped and acknowledged it, and the lease expired as a spent attempt",
				name, id, st, deref(j.LastErrorClass), deref(j.LastError), n)
		}
	}
}
