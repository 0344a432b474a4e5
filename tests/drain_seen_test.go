package tests

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/consumers"
	"github.com/inlet-dev/inlet/internal/testwait"
	"github.com/inlet-dev/inlet/schema"
	"github.com/inlet-dev/inlet/streamer"
)

// TestDrainingConsumerDoesNotCountLeasesItNeverRead (review helper-175, fixed; this describes the code before the fix):
// a single-team deployment (webhook_worker only), handler "shared"
// with one consumer service, max_attempts 1. The service stops gracefully
// while one attempt holds its drain open. Stop cancels the subscriptions and
// writes alive_until = now (commit a04fb64), but the alive loop keeps
// writing seen_at = now() every AliveInterval for the whole drain
// (consumers/alive.go sayAlive, draining branch: only `until` changes).
// A streamer whose quiet list is still the one it read before the drain mark
// (CountLeasedJobs runs every LeasedRecount) leases the handler's new jobs
// and publishes them on a topic nobody reads any more. When their leases
// expire, ReapExpiredLeases' `ran` (schema/queries/jobs.sql:180-182:
// `c.seen_at >= j.attempted_at`) is true because the draining service's
// seen_at advanced past attempted_at, so the attempt counts and, being the
// last, the job is dead-lettered (lease_expired) although no handler ever
// ran it. A crashed consumer (seen_at frozen) or a stopped one (ConsumerGone:
// seen_at -infinity) would have these leases returned uncounted; only a
// graceful drain burns them.
//
// Now (guarantee 5, "while a handler's consumers are all down nothing
// of it is ... spent"): a lease taken after the consumer stopped reading is
// not counted: back to pending, run by the next consumer start.
func TestDrainingConsumerDoesNotCountLeasesItNeverRead(t *testing.T) {
	rr := newReviewRouting(t)

	release := make(chan struct{})
	var releaseOnce sync.Once
	releaseFn := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(releaseFn)
	var blockerRunning atomic.Bool
	fn := func(ctx context.Context, e *consumers.Event) error {
		rr.mu.Lock()
		rr.ran[e.JobID] = append(rr.ran[e.JobID], e.Provider)
		rr.mu.Unlock()
		if !blockerRunning.Swap(true) {
			select { // the first attempt holds the drain open
			case <-release:
			case <-time.After(30 * time.Second):
			}
		}
		return nil
	}
	svc := review173Service(t, rr, rr.p.pool(t, schema.WorkerRole, 8), "only", []string{"stripe"}, 1, 4, fn)
	// The quiet list is re-read every LeasedRecount (a valid setting; the
	// default 100 ms fails the same way here, the jobs arriving within it).
	rr.p.startStreamer(t, streamer.Config{ID: "s1", LeaseDuration: 2 * time.Second, PollInterval: 50 * time.Millisecond,
		ReapInterval: 100 * time.Millisecond, LeasedRecount: 10 * time.Second})

	rr.insert(t, "blocker", 1, "stripe")
	testwait.Eventually(t, 20*time.Second, "the consumer runs the first job", func() (bool, string) {
		return blockerRunning.Load(), "not yet"
	})
	ctx := context.Background()
	stopped := make(chan error, 1)
	go func() {
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		stopped <- svc.Stop(sctx)
	}()
	testwait.Eventually(t, 10*time.Second, "the draining mark is written", func() (bool, string) {
		var alive bool
		err := rr.p.admin.QueryRow(ctx, `SELECT bool_or(alive_until > now()) FROM webhook_ingress.consumers WHERE handler = 'shared'`).Scan(&alive)
		return err == nil && !alive, fmt.Sprintf("alive %v (%v)", alive, err)
	})
	rr.insert(t, "draining", 5, "stripe")

	// Wait until every job inserted during the drain was leased and its
	// lease reaped (or it was never leased); the blocker keeps the drain on.
	testwait.Eventually(t, 20*time.Second, "the drain jobs' leases ended", func() (bool, string) {
		var leased, everLeased int
		err := rr.p.admin.QueryRow(ctx, `SELECT count(*) FILTER (WHERE j.status = 'leased'),
			count(*) FILTER (WHERE j.status <> 'pending' OR j.attempt_count > 0 OR j.attempted_at IS NOT NULL)
			FROM webhook_ingress.jobs j JOIN webhook_ingress.events e ON e.id = j.event_id
			WHERE j.handler = 'shared' AND e.external_event_id LIKE 'evt_rv_draining_%'`).Scan(&leased, &everLeased)
		return err == nil && leased == 0 && everLeased > 0, fmt.Sprintf("%d leased, %d ever leased (%v)", leased, everLeased, err)
	})

	rows, err := rr.p.admin.Query(ctx, `SELECT j.id, j.status::text, j.attempt_count, coalesce(j.last_error_class, '')
		FROM webhook_ingress.jobs j JOIN webhook_ingress.events e ON e.id = j.event_id
		WHERE j.handler = 'shared' AND e.external_event_id LIKE 'evt_rv_draining_%' ORDER BY j.id`)
	if err != nil {
		t.Fatal(err)
	}
	bad := 0
	for rows.Next() {
		var id int64
		var status, class string
		var attempts int
		if err := rows.Scan(&id, &status, &attempts, &class); err != nil {
			t.Fatal(err)
		}
		rr.mu.Lock()
		got := len(rr.ran[id])
		rr.mu.Unlock()
		if got == 0 && (status == "dead_letter" || attempts > 0) {
			bad++
			t.Errorf("job %d (inserted while its only consumer drained, never run): %s, attempt_count %d, %s; want pending, attempt not counted",
				id, status, attempts, class)
		}
	}
	rows.Close()
	releaseFn()
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	if bad > 0 {
		t.Errorf("%d jobs leased after their only consumer stopped reading had their last attempt counted (dead-lettered unrun): the draining consumer's seen_at kept advancing", bad)
	}
}
