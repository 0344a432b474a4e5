package streamer_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/consumers"
	"github.com/inlet-dev/inlet/internal/database"
	"github.com/inlet-dev/inlet/internal/testlog"
	"github.com/inlet-dev/inlet/streamer"
)

// TestGracefullyStoppedConsumerLeavesItsHandlerUnleased (review helper-87).
//
// Defect: the consumer SDK's graceful stop runs ConsumerGone, which DELETEs
// the service's rows from webhook_ingress.consumers
// (schema/queries/jobs.sql, ConsumerGone). The streamer decides that a
// handler's consumers "have all gone quiet" only from rows that are there
// (CountLeasedJobs: GROUP BY handler HAVING max(alive_until) < now()), and
// a handler with no row at all is "no consumer known" and leased as usual.
// So when the last consumer of a handler stops gracefully (every deploy,
// scale to zero, a maintenance window) the handler goes from "quiet" to
// "unknown" and the streamers lease its jobs again, publishing references
// nobody reads: up to max_leased_per_handler (5000) leases per lease
// period, re-leased after each reap, piling stale references into the
// handler's JetStream consumer; for a limited handler its max_in_flight and
// tokens are spent on jobs no handler runs. A consumer that is SIGKILLed
// instead leaves its row to run out and the handler is correctly held.
//
// Expected (consumers/alive.go aliveLoop: "and then that it is gone, so
// streamers stop leasing at once for handlers that have no other
// consumer"; docs/pipeline.md Recovery: "while a handler's consumers are
// all down nothing of it is leased"): after the handler's only consumer
// stopped, none of its new jobs is leased.
func TestGracefullyStoppedConsumerLeavesItsHandlerUnleased(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	worker, err := database.Open(ctx, b.url, database.Options{Role: "webhook_worker"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(worker.Close)
	logs := &testlog.Buffer{}
	svc, err := consumers.New(consumers.Config{
		Pool: worker, Subscriber: b.pubsub, WorkerID: "billing-1", AliveInterval: 50 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(logs, nil)),
		Handlers: []consumers.Handler{{
			Name: "billing",
			Func: func(context.Context, *consumers.Event) error { return nil },
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("consumer log:\n%s", logs.String())
		}
	})
	if n := b.count(t, `SELECT count(*) FROM webhook_ingress.consumers WHERE handler = 'billing'`); n != 1 {
		t.Fatalf("%d consumers rows for the running consumer, want 1", n)
	}
	// The handler's only consumer stops, gracefully (a deploy, scale to zero).
	if err := svc.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	rows := b.count(t, `SELECT count(*) FROM webhook_ingress.consumers WHERE handler = 'billing'`)

	// Events keep arriving while it is down.
	b.insertEvents(t, 20)
	if n := b.count(t, `SELECT count(*) FROM webhook_ingress.jobs WHERE handler = 'billing'`); n != 20 {
		t.Fatalf("%d jobs of billing, want 20 (the subscription the consumer registered)", n)
	}
	s := b.newStreamer(t, streamer.Config{LeasedRecount: time.Millisecond, LeaseDuration: time.Minute})
	for range 3 {
		if _, err := s.ClaimOnce(ctx); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if n := b.count(t, `SELECT count(*) FROM webhook_ingress.jobs WHERE handler = 'billing' AND status = 'leased'`); n != 0 {
		t.Fatalf("%d of the 20 jobs of handler billing leased (and published to a topic nobody reads) after its only "+
			"consumer stopped gracefully: the stop deleted its consumers row (%d rows left), so the handler counts as "+
			"'no consumer known' instead of 'consumers all quiet'", n, rows)
	}
}
