package consumers_test

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/consumers"
	"github.com/inlet-dev/inlet/consumers/bus"
	"github.com/inlet-dev/inlet/consumers/internal/consumertest"
	"github.com/inlet-dev/inlet/internal/testwait"
	"github.com/inlet-dev/inlet/schema/queries"
)

// limitedClaimLoop claims handler's jobs as the streamer claims a limited
// handler (LockHandlerLimits, then ClaimLimitedJobs, one transaction, as
// webhook_streamer) every tick, and publishes each claim's references in one
// message. Like the streamer's pace hold at its floor
// (min_leased_per_handler, 4), it leases only while fewer than floor of the
// handler's leases are unextended (references no consumer has extended yet).
func limitedClaimLoop(t *testing.T, b *testBundle, handler string, lease time.Duration, floor int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			var unextended int
			if err := b.Admin.QueryRow(context.Background(), `SELECT count(*) FROM webhook_ingress.jobs
				WHERE handler = $1 AND status = 'leased' AND worker_id IS NULL`, handler).Scan(&unextended); err != nil {
				t.Errorf("count unextended leases: %v", err)
				return
			}
			if unextended >= floor {
				continue
			}
			var refs []bus.Ref
			err := consumertest.AsRole(context.Background(), b.Admin, "webhook_streamer", func(tx pgx.Tx) error {
				q := queries.New(tx)
				if err := q.LockHandlerLimits(context.Background(), handler); err != nil {
					return err
				}
				rows, err := q.ClaimLimitedJobs(context.Background(), queries.ClaimLimitedJobsParams{
					Handler: handler, BatchSize: int64(floor - unextended), LeaseHolder: "review331-streamer", LeaseFor: lease})
				if err != nil {
					return err
				}
				for _, j := range rows {
					refs = append(refs, bus.Ref{JobID: j.ID, EventID: j.EventID, Handler: j.Handler, Provider: j.Provider,
						EventType: j.EventType, Attempt: int(j.AttemptCount), LeaseExpiresAt: j.LeaseExpiresAt,
						EventReceivedAt: j.EventReceivedAt, LeasedAt: j.AttemptedAt})
				}
				return nil
			})
			if err != nil {
				t.Errorf("limited claim: %v", err)
				return
			}
			if len(refs) > 0 {
				if err := b.PublishBatch(refs); err != nil {
					t.Errorf("publish: %v", err)
					return
				}
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
}

// maxStartsInWindow is the most of times (sorted) within any window of length w.
func maxStartsInWindow(times []time.Time, w time.Duration) int {
	best := 0
	for i := range times {
		n := 0
		for j := i; j < len(times) && times[j].Sub(times[i]) < w; j++ {
			n++
		}
		best = max(best, n)
	}
	return best
}

// TestRateLimitCapsStartsNotJustLeases (review helper-331, fixed).
// Defect: Handler.RateLimit is documented as "caps how many of this
// handler's jobs start per second across every consumer replica" and Burst
// as "how many jobs may start at once", but the limit is applied only when
// the streamer leases (claim_limited_jobs). References leased at the rate
// while the handler's slots are busy (a downstream that slows for a few
// seconds: the very case a rate limit protects) wait in the consumer, their
// leases extended (extendWaiting: worker_id set, so the streamer's pace
// hold no longer counts them), and when a slot frees they all start back to
// back (consumers/service.go: Service.read / waitForSlot / start apply no
// pacing). The downstream gets the whole backlog at once, far above
// RateLimit and Burst, right when it recovers.
// Setup: handler with RateLimit 1/s, Burst 1, Concurrency 1; 7 due jobs; a
// claim loop that claims as the streamer claims a limited handler
// (LockHandlerLimits + ClaimLimitedJobs) and, as the streamer's pace hold at
// its floor, keeps at most 4 unextended leases; the first call blocks until
// 5 jobs are leased (one running, four queued), then every call returns at once.
// Expected: at most Burst + RateLimit·1s = 2 handler starts in any 1 s window.
// Observed: 5 starts within ~10 ms of the first call's return (max 5-6 in
// 1 s) — every lease queued during the stall starts at once.
// Fixed: each consumer process paces a rate-limited handler's starts with
// a token bucket of its own (RateLimit, Burst; golang.org/x/time/rate),
// waited for after the slot (Service.waitForToken); a reference whose token
// comes later than its lease allows is given back uncounted
// (giveBackPaced), for the streamer to lease again at the rate.
func TestRateLimitCapsStartsNotJustLeases(t *testing.T) {
	b := setup(t)
	const handler = "review331_paced"
	var mu sync.Mutex
	var starts []time.Time
	release := make(chan struct{})
	first := true
	cfg := b.config(consumers.Handler{
		Name: handler, Provider: "stripe", EventType: "review331.*",
		RateLimit: 1, Burst: 1, Concurrency: 1, Timeout: 60 * time.Second,
		Func: func(ctx context.Context, e *consumers.Event) error {
			mu.Lock()
			starts = append(starts, time.Now())
			block := first
			first = false
			mu.Unlock()
			if block {
				select {
				case <-release:
				case <-ctx.Done():
				}
			}
			return nil
		},
	})
	// A running attempt's lease (30 s) is extended as soon as it is taken
	// (less than LeaseExtend/2 left), so only the waiting references count
	// as unextended in the claim loop's pace hold.
	cfg.LeaseExtend = 90 * time.Second
	b.start(t, cfg)
	const jobs = 7
	for i := 0; i < jobs; i++ {
		b.InsertEvent(t, consumertest.EventParams{EventType: "review331.paced"})
	}
	limitedClaimLoop(t, b, handler, 30*time.Second, 4)

	// The downstream stalls until five jobs are leased: one running, four
	// waiting in the consumer.
	testwait.Eventually(t, 60*time.Second, "5 jobs leased during the stall", func() (bool, string) {
		var n int
		if err := b.Admin.QueryRow(context.Background(), `SELECT count(*) FROM webhook_ingress.jobs WHERE handler = $1 AND status = 'leased'`, handler).Scan(&n); err != nil {
			return false, err.Error()
		}
		return n >= 5, fmt.Sprintf("%d leased", n)
	})
	close(release)
	testwait.Eventually(t, 60*time.Second, "every job completed", func() (bool, string) {
		var n int
		if err := b.Admin.QueryRow(context.Background(), `SELECT count(*) FROM webhook_ingress.jobs WHERE handler = $1 AND status = 'completed'`, handler).Scan(&n); err != nil {
			return false, err.Error()
		}
		return n == jobs, fmt.Sprintf("%d of %d completed", n, jobs)
	})

	mu.Lock()
	got := append([]time.Time(nil), starts...)
	mu.Unlock()
	sort.Slice(got, func(i, j int) bool { return got[i].Before(got[j]) })
	var gaps []string
	for i := 1; i < len(got); i++ {
		gaps = append(gaps, got[i].Sub(got[i-1]).Round(time.Millisecond).String())
	}
	if n := maxStartsInWindow(got, time.Second); n > 2 {
		t.Errorf("%d handler starts within one second under RateLimit 1/s, Burst 1 (at most 2 allowed: burst + rate·1s); gaps between starts: %v", n, gaps)
	}
}

// claimLimited leases n of handler's due jobs for lease as the streamer
// leases a limited handler (LockHandlerLimits, ClaimLimitedJobs), one at a
// time, each on a token put in its bucket: as the streamer leased them at
// the rate while the consumer's slots were busy.
func claimLimited(t *testing.T, b *testBundle, handler string, lease time.Duration, n int) []bus.Ref {
	t.Helper()
	ctx := context.Background()
	var refs []bus.Ref
	for range n {
		if _, err := b.Admin.Exec(ctx, `UPDATE webhook_ingress.handler_limits SET tokens = 1, refilled_at = now() WHERE handler = $1`, handler); err != nil {
			t.Fatalf("put a token in the bucket of handler %q: %v", handler, err)
		}
		err := consumertest.AsRole(ctx, b.Admin, "webhook_streamer", func(tx pgx.Tx) error {
			q := queries.New(tx)
			if err := q.LockHandlerLimits(ctx, handler); err != nil {
				return err
			}
			rows, err := q.ClaimLimitedJobs(ctx, queries.ClaimLimitedJobsParams{
				Handler: handler, BatchSize: 1, LeaseHolder: "test-streamer", LeaseFor: lease})
			if err != nil {
				return err
			}
			for _, j := range rows {
				refs = append(refs, bus.Ref{JobID: j.ID, EventID: j.EventID, Handler: j.Handler, Provider: j.Provider,
					EventType: j.EventType, Attempt: int(j.AttemptCount), LeaseExpiresAt: j.LeaseExpiresAt,
					EventReceivedAt: j.EventReceivedAt, LeasedAt: j.AttemptedAt})
			}
			return nil
		})
		if err != nil {
			t.Fatalf("claim a job of handler %q: %v", handler, err)
		}
	}
	return refs
}

// oneCompleted waits until job a or job b is completed, and returns that
// one first, the other second.
func oneCompleted(t *testing.T, b *testBundle, a, c int64) (done, other int64) {
	t.Helper()
	testwait.Eventually(t, 30*time.Second, fmt.Sprintf("job %d or job %d completed", a, c), func() (bool, string) {
		ja, jc := b.Job(t, a), b.Job(t, c)
		switch {
		case ja.Status == "completed":
			done, other = a, c
		case jc.Status == "completed":
			done, other = c, a
		}
		return done != 0, fmt.Sprintf("%s and %s", ja.Status, jc.Status)
	})
	return done, other
}

// reapLoop reaps expired leases as the streamer's reaper does, every 50 ms,
// until the test ends.
func reapLoop(t *testing.T, b *testBundle) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			err := consumertest.AsRole(ctx, b.Admin, "webhook_streamer", func(tx pgx.Tx) error {
				_, err := queries.New(tx).ReapExpiredLeases(ctx, 100)
				return err
			})
			if err != nil && ctx.Err() == nil {
				t.Errorf("reap expired leases: %v", err)
				return
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
}

// A reference whose start token comes later than what is left of its lease
// allows, but within LeaseExtend/2, has its lease extended and waits: it
// starts on its token, its lease never lapsing (a reaper runs), and its
// attempt is counted once.
func TestRateLimitWaitExtendsTheLease(t *testing.T) {
	b := setup(t)
	const handler = "paced_extend"
	var mu sync.Mutex
	var starts []time.Time
	cfg := b.config(consumers.Handler{
		Name: handler, Provider: "stripe", EventType: "paced.*",
		RateLimit: 0.5, Burst: 1, Concurrency: 2,
		Func: func(context.Context, *consumers.Event) error {
			mu.Lock()
			starts = append(starts, time.Now())
			mu.Unlock()
			return nil
		},
	})
	cfg.LeaseExtend = 8 * time.Second // a token's 2 s is within LeaseExtend/2
	b.start(t, cfg)
	ids := []int64{
		b.JobID(t, b.InsertEvent(t, consumertest.EventParams{EventType: "paced.one"}), handler),
		b.JobID(t, b.InsertEvent(t, consumertest.EventParams{EventType: "paced.two"}), handler),
	}
	reapLoop(t, b)
	// Leased for 1 s: the second reference's token comes 2 s after the first's.
	refs := claimLimited(t, b, handler, time.Second, 2)
	if len(refs) != 2 {
		t.Fatalf("claimed %d references, want 2", len(refs))
	}
	if err := b.PublishBatch(refs); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		b.WaitJobStatus(t, id, "completed", 30*time.Second)
	}
	for _, id := range ids {
		if j, outcomes := b.Job(t, id), b.Outcomes(t, id); j.AttemptCount != 1 || len(outcomes) != 1 || outcomes[0] != "completed" {
			t.Errorf("job %d: %d attempts counted, outcomes %v; want one attempt, completed (the lease kept while waiting for its token)", id, j.AttemptCount, outcomes)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(starts) != 2 {
		t.Fatalf("%d handler starts, want 2", len(starts))
	}
	if gap := starts[1].Sub(starts[0]); gap < 1900*time.Millisecond {
		t.Errorf("second start %s after the first, want the token interval (2s) under RateLimit 0.5/s, Burst 1", gap)
	}
}

// A reference whose start token comes later than its lease allows even
// extended (past LeaseExtend/2) is given back, uncounted and unrun: its job
// is pending again, for the streamer to lease at the rate.
func TestRateLimitGivesBackWhatCannotStartInItsLease(t *testing.T) {
	b := setup(t)
	const handler = "paced_give_back"
	var calls atomic.Int64
	cfg := b.config(consumers.Handler{
		Name: handler, Provider: "stripe", EventType: "paced.*",
		RateLimit: 0.01, Burst: 1, Concurrency: 2, // a token every 100 s
		Func: func(context.Context, *consumers.Event) error {
			calls.Add(1)
			return nil
		},
	})
	cfg.LeaseExtend = 2 * time.Second
	b.start(t, cfg)
	first := b.JobID(t, b.InsertEvent(t, consumertest.EventParams{EventType: "paced.one"}), handler)
	second := b.JobID(t, b.InsertEvent(t, consumertest.EventParams{EventType: "paced.two"}), handler)
	refs := claimLimited(t, b, handler, 30*time.Second, 2)
	if len(refs) != 2 {
		t.Fatalf("claimed %d references, want 2", len(refs))
	}
	if err := b.PublishBatch(refs); err != nil {
		t.Fatal(err)
	}
	// The attempts of one message take their tokens in the order they ask,
	// after their shared read: either may be the one that starts.
	_, second = oneCompleted(t, b, first, second)
	j := b.WaitJobStatus(t, second, "pending", 30*time.Second)
	b.waitLogged(t, "would wait for the handler's rate limit longer than its lease allows", 1)
	if j.AttemptCount != 0 || j.LeaseExpiresAt != nil {
		t.Errorf("given back job %d: %d attempts counted, lease %v; want none counted, no lease", second, j.AttemptCount, j.LeaseExpiresAt)
	}
	if outcomes := b.Outcomes(t, second); len(outcomes) != 0 {
		t.Errorf("given back job %d has attempts %v, want none", second, outcomes)
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("handler called %d times, want 1 (the second job given back unrun)", n)
	}
}
