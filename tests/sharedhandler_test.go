package tests

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/inlet-dev/inlet/consumers"
	"github.com/inlet-dev/inlet/consumers/bus/natsbus"
	"github.com/inlet-dev/inlet/internal/natstest"
	"github.com/inlet-dev/inlet/internal/testwait"
	"github.com/inlet-dev/inlet/schema/queries"
	"github.com/inlet-dev/inlet/streamer"
)

var sharedRoleSeq atomic.Int64

// A handler shared by two teams' consumer roles of different scopes (team
// A: stripe, team B: github; docs/operations.md, "A database role per
// consumer") gets each job to a consumer that may take it, over NATS and
// over the in-process bus: every job completes, run once, by its own team,
// with max_attempts 1 (one misrouted reference would dead-letter it).
// Before (review helper-163), both teams read the handler's one topic; the
// team given the other's reference could not see its job, and the lease
// expired as a spent attempt (dead_letter, lease_expired, never run). Now
// the streamer publishes a shared handler's jobs on the topic of the role
// whose scope covers them (ListJobRoutes, bus.RoleTopic), which that role's
// consumers read beside the handler's own.
func TestSharedHandlerJobsReachTheRoleThatMayTakeThem(t *testing.T) {
	for _, transport := range []string{"nats", "gochannel"} {
		t.Run(transport, func(t *testing.T) {
			p := newPipeline(t)
			ctx := context.Background()
			quiet := slog.New(slog.DiscardHandler)
			var newSub func() message.Subscriber
			switch transport {
			case "nats":
				srv := natstest.Start(t)
				newBus := func(name string) *natsbus.NATS {
					n, err := natsbus.New(ctx, natsbus.Config{URL: srv.URL(), Name: name, Logger: quiet})
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { n.Close() })
					return n
				}
				p.bus = newBus("streamer")
				newSub = func() message.Subscriber { return newBus("consumer") }
			default:
				newSub = func() message.Subscriber { return p.bus }
			}

			var mu sync.Mutex
			ran := map[int64][]string{} // job id: the teams that ran it
			team := func(name, scope string) {
				role := fmt.Sprintf("webhook_consumer_shared%d_%d", os.Getpid(), sharedRoleSeq.Add(1))
				if _, err := queries.New(p.admin).CreateConsumerRole(ctx, queries.CreateConsumerRoleParams{Role: role,
					Handlers: []string{"shared"}, ScopeProviders: []string{scope}, ScopeTypes: []string{"*"}}); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() {
					if _, err := queries.New(p.admin).DropConsumerRole(context.Background(), role); err != nil {
						t.Errorf("drop role %s: %v", role, err)
					}
				})
				svc, err := consumers.New(consumers.Config{
					Pool: p.pool(t, role, 8), Subscriber: newSub(), WorkerID: name, Logger: quiet,
					AliveInterval: 200 * time.Millisecond,
					Handlers: []consumers.Handler{{Name: "shared", Provider: scope, MaxAttempts: 1, Concurrency: 4,
						Func: func(_ context.Context, e *consumers.Event) error {
							mu.Lock()
							ran[e.JobID] = append(ran[e.JobID], name+":"+e.Provider)
							mu.Unlock()
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
			}
			team("team-a", "stripe")
			team("team-b", "github")
			// Both teams' consumers have said which role they run as
			// before the streamer's first recount.
			p.startStreamer(t, streamer.Config{ID: "s1", LeaseDuration: 2 * time.Second, PollInterval: 50 * time.Millisecond,
				ReapInterval: 100 * time.Millisecond})

			const each = 40
			if _, err := p.admin.Exec(ctx, `INSERT INTO webhook_ingress.events
				(provider, scheme, external_event_id, event_type, raw_body, signature_verified)
				SELECT CASE WHEN g % 2 = 0 THEN 'stripe' ELSE 'github' END, 'stripe', 'evt_shared_' || g, 'x', '{}', true
				FROM generate_series(1, $1) g`, 2*each); err != nil {
				t.Fatal(err)
			}
			testwait.Eventually(t, 60*time.Second, "every job of the shared handler finished", func() (bool, string) {
				var open int
				err := p.admin.QueryRow(ctx, `SELECT count(*) FROM webhook_ingress.jobs
					WHERE handler = 'shared' AND status NOT IN ('completed', 'dead_letter')`).Scan(&open)
				return err == nil && open == 0, fmt.Sprintf("%d open (%v)", open, err)
			})
			rows, err := p.admin.Query(ctx, `SELECT j.id, e.provider, j.status, coalesce(j.last_error_class, '')
				FROM webhook_ingress.jobs j JOIN webhook_ingress.events e ON e.id = j.event_id WHERE j.handler = 'shared'`)
			if err != nil {
				t.Fatal(err)
			}
			defer rows.Close()
			n := 0
			for rows.Next() {
				var id int64
				var provider, status, class string
				if err := rows.Scan(&id, &provider, &status, &class); err != nil {
					t.Fatal(err)
				}
				n++
				owner := map[string]string{"stripe": "team-a", "github": "team-b"}[provider]
				mu.Lock()
				got := ran[id]
				mu.Unlock()
				if status != "completed" || len(got) != 1 || got[0] != owner+":"+provider {
					t.Errorf("job %d (%s): %s %s, run by %v; want completed, run once by %s", id, provider, status, class, got, owner)
				}
			}
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
			if n != 2*each {
				t.Fatalf("%d jobs of the shared handler, want %d", n, 2*each)
			}
			var expired int
			if err := p.admin.QueryRow(ctx, `SELECT count(*) FROM webhook_ingress.job_attempts WHERE error_class = 'lease_expired'`).Scan(&expired); err != nil {
				t.Fatal(err)
			}
			if expired > 0 {
				t.Errorf("%d attempts expired: references reached a role that could not take them", expired)
			}
		})
	}
}
