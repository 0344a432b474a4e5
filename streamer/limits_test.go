package streamer_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/consumers"
	"github.com/inlet-dev/inlet/internal/database"
	"github.com/inlet-dev/inlet/internal/testlog"
	"github.com/inlet-dev/inlet/internal/testwait"
	"github.com/inlet-dev/inlet/schema/queries"
	"github.com/inlet-dev/inlet/streamer"
)

// limits sets handler's row in handler_limits as a consumer registers it.
func (b *testBundle) limits(t *testing.T, handler, set string) {
	t.Helper()
	ctx := context.Background()
	if _, err := b.admin.Exec(ctx, `INSERT INTO webhook_ingress.handler_limits (handler) VALUES ($1)`, handler); err != nil {
		t.Fatal(err)
	}
	if _, err := b.admin.Exec(ctx, `UPDATE webhook_ingress.handler_limits SET `+set+` WHERE handler = $1`, handler); err != nil {
		t.Fatal(err)
	}
}

// A rate limit holds across two streamers claiming side by side: in any
// time T since the start, no more than burst + rate·T jobs of the handler are
// leased (a bound a slow machine can only stay further under), while an
// unlimited handler's jobs all go at once.
func TestRateLimitHoldsAcrossStreamers(t *testing.T) {
	t.Parallel()
	b := setup(t, "limited", "free")
	ctx := context.Background()
	const rate, burst = 20.0, 5
	b.limits(t, "limited", fmt.Sprintf("rate_per_second = %g, burst = %d, tokens = %d, refilled_at = now()", rate, burst, burst))
	refs := b.collect(t, "limited", "free")
	b.insertEvents(t, 60) // a job of each handler per event
	start := time.Now()
	for i := range 2 {
		s := b.newStreamer(t, streamer.Config{ID: fmt.Sprintf("s%d", i), PollInterval: 20 * time.Millisecond, LeaseDuration: time.Minute})
		if err := s.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Stop() })
	}
	limited, free := 0, 0
	for limited < 60 || free < 60 {
		select {
		case r := <-refs.got:
			elapsed := time.Since(start).Seconds()
			if r.Handler == "free" {
				free++
				continue
			}
			limited++
			if bound := float64(burst) + rate*elapsed; float64(limited) > bound+1e-9 {
				t.Fatalf("%d jobs of the limited handler leased within %.3fs, more than burst %d + %g/s", limited, elapsed, burst, rate)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("leased %d limited and %d free of 60 each within 30s", limited, free)
		}
	}
	if took := time.Since(start).Seconds(); took < (60-burst)/rate*0.9 {
		t.Fatalf("60 limited jobs leased in %.2fs, faster than the rate allows", took)
	}
}

// max_in_flight caps a handler's leases across streamers: nobody completes
// its jobs, so leases pile up to the cap and no further.
func TestMaxInFlightHoldsAcrossStreamers(t *testing.T) {
	t.Parallel()
	b := setup(t, "capped")
	ctx := context.Background()
	b.limits(t, "capped", "max_in_flight = 7")
	b.insertEvents(t, 50)
	var ss []*streamer.Streamer
	for i := range 2 {
		ss = append(ss, b.newStreamer(t, streamer.Config{ID: fmt.Sprintf("s%d", i), LeaseDuration: time.Minute}))
	}
	for range 10 {
		for _, s := range ss {
			if _, err := s.ClaimOnce(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	if n := b.count(t, `SELECT count(*) FROM webhook_ingress.jobs WHERE handler = 'capped' AND status = 'leased'`); n != 7 {
		t.Fatalf("%d leased, want the cap of 7", n)
	}
}

// max_in_flight holds when two streamers' claims of the handler wait for its
// row together (as when both wake on the same NOTIFY): the second to get the
// row counts the leases the first committed. A third session holds the row
// until both wait. Each claim counted the leases on a snapshot taken before
// it waited, so the second leased max_in_flight more (14 of 7).
func TestMaxInFlightHoldsWhenClaimsWaitTogether(t *testing.T) {
	t.Parallel()
	b := setup(t, "capped")
	ctx := context.Background()
	b.limits(t, "capped", "max_in_flight = 7")
	b.insertEvents(t, 50)
	var ss []*streamer.Streamer
	for i := range 2 {
		ss = append(ss, b.newStreamer(t, streamer.Config{ID: fmt.Sprintf("s%d", i), LeaseDuration: time.Minute}))
	}
	tx, err := b.admin.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `SELECT FROM webhook_ingress.handler_limits WHERE handler = 'capped' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	// A limited claim waits at most 200 ms for the row (limitsLockTimeout)
	// and then leases nothing that round: each streamer claims again until
	// both were seen waiting together (one claim each, started apart on a
	// loaded CI run, never overlapped, and the test waited 30 s for
	// nothing), and stops after the round under way when the row is freed.
	var seen atomic.Bool
	errs := make(chan error, len(ss))
	for _, s := range ss {
		go func() {
			for {
				n, err := s.ClaimOnce(ctx)
				if err != nil || n > 0 || seen.Load() {
					errs <- err
					return
				}
			}
		}()
	}
	testwait.Eventually(t, 30*time.Second, "both claims waiting for the handler's row", func() (bool, string) { // 10 s passed under a loaded CI run
		n := b.count(t, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`)
		return n == 2, fmt.Sprintf("%d sessions waiting for a lock", n)
	})
	seen.Store(true)
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	for range ss {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if n := b.count(t, `SELECT count(*) FROM webhook_ingress.jobs WHERE handler = 'capped' AND status = 'leased'`); n != 7 {
		t.Fatalf("%d leased, want the cap of 7", n)
	}
}

// A handler's limits row removed after the streamer listed the limited
// handlers (its consumer registered it again without limits, within
// LeasedRecount): its claim leases nothing until the next recount hands it
// to ClaimJobs. It used to lease every due job of the handler (LIMIT NULL),
// fail to read the answer (a NULL probe) and publish none of them.
func TestLimitsRowGoneLeasesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t, "h")
	ctx := context.Background()
	b.limits(t, "h", "max_in_flight = 1000")
	b.insertEvents(t, 500)
	s := b.newStreamer(t, streamer.Config{ID: "s0", BatchSize: 10, MaxLeasedPerHandler: 20, LeasedRecount: time.Hour, LeaseDuration: time.Minute})
	first, err := s.ClaimOnce(ctx) // lists h as limited
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.admin.Exec(ctx, `DELETE FROM webhook_ingress.handler_limits WHERE handler = 'h'`); err != nil {
		t.Fatal(err)
	}
	second, err := s.ClaimOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if first != 10 || second != 0 {
		t.Fatalf("claims leased %d and %d, want 10 (BatchSize) and 0 (no limits row)", first, second)
	}
	if n := b.count(t, `SELECT count(*) FROM webhook_ingress.jobs WHERE status = 'leased'`); n != first+second {
		t.Fatalf("%d jobs leased in Postgres, %d published", n, first+second)
	}
	if got := s.Stats().Published; got != int64(first+second) {
		t.Fatalf("%d references published, want %d", got, first+second)
	}
}

// A claim of a limited handler that fails after it may have committed (here
// its deadline passes while it waits for the handler's row, which a third
// session holds) gives back this streamer's leases of the handler newer
// than the ones it published: left to the reaper, they would spend an
// attempt (a job on its last one dead-lettered) though no handler saw them.
// The leases its earlier claim published stay.
func TestFailedLimitedClaimGivesBackUnseenLeases(t *testing.T) {
	t.Parallel()
	b := setup(t, "h")
	ctx := context.Background()
	b.limits(t, "h", "max_in_flight = 1000")
	b.insertEvents(t, 30)
	s := b.newStreamer(t, streamer.Config{ID: "s0", BatchSize: 5, LeasedRecount: time.Hour, LeaseDuration: time.Minute})
	if n, err := s.ClaimOnce(ctx); err != nil || n != 5 {
		t.Fatalf("first claim leased %d (%v), want 5", n, err)
	}
	// What a claim whose answer never reached s0 committed: leases in its name.
	unseen, err := queries.New(b.pool).ClaimLimitedJobs(ctx, queries.ClaimLimitedJobsParams{
		Handler: "h", BatchSize: 5, LeaseHolder: "s0", LeaseFor: time.Minute})
	if err != nil || len(unseen) != 5 {
		t.Fatalf("claim as s0 leased %d (%v), want 5", len(unseen), err)
	}
	tx, err := b.admin.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `SELECT FROM webhook_ingress.handler_limits WHERE handler = 'h' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	// Shorter than the claim's own wait for the row (limitsLockTimeout,
	// 200 ms: past it the claim leases nothing and fails nothing).
	cctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if n, err := s.ClaimOnce(cctx); err != nil || n != 0 {
		t.Fatalf("claim behind the held row leased %d (%v), want 0", n, err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for _, j := range unseen {
		ids = append(ids, j.ID)
	}
	if n := b.count(t, `SELECT count(*) FROM webhook_ingress.jobs WHERE id = ANY($1) AND status = 'pending' AND attempt_count = 0`, ids); n != 5 {
		t.Fatalf("%d of the 5 unseen leases given back (pending, attempt not counted)", n)
	}
	if n := b.count(t, `SELECT count(*) FROM webhook_ingress.jobs WHERE status = 'leased'`); n != 5 {
		t.Fatalf("%d jobs leased, want the 5 published", n)
	}
}

// A circuit breaker with a real consumer: after 3 consecutive failures the
// circuit opens and the handler's other jobs wait with no attempt spent;
// probes (one job at a time) fail and keep it open; once the downstream is
// back a probe succeeds, the circuit closes and every job completes.
func TestCircuitBreakerHoldsJobsAndProbes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	worker, err := database.Open(ctx, b.url, database.Options{Role: "webhook_worker"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(worker.Close)
	var down atomic.Bool
	down.Store(true)
	var runs atomic.Int32
	logs := &testlog.Buffer{}
	svc, err := consumers.New(consumers.Config{
		Pool: worker, Subscriber: b.pubsub, WorkerID: "w1",
		Logger: slog.New(slog.NewTextHandler(logs, nil)),
		Handlers: []consumers.Handler{{
			Name: "forward", MaxAttempts: 25, MaxInFlight: 1, BreakerFailures: 3, BreakerProbeInterval: time.Second,
			Backoff: func(int) time.Duration { return 0 },
			Func: func(context.Context, *consumers.Event) error {
				runs.Add(1)
				if down.Load() {
					return errors.New("downstream unavailable")
				}
				return nil
			},
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = svc.Stop(context.Background())
		if t.Failed() {
			t.Logf("consumer log:\n%s", logs.String())
		}
	})
	b.insertEvents(t, 10)
	s := b.newStreamer(t, streamer.Config{PollInterval: 50 * time.Millisecond, LeaseDuration: time.Minute})
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Stop() })

	circuit := func() string {
		var c string
		if err := b.admin.QueryRow(ctx, `SELECT circuit FROM webhook_ingress.handler_limits WHERE handler = 'forward'`).Scan(&c); err != nil {
			t.Fatal(err)
		}
		return c
	}
	testwait.Eventually(t, 15*time.Second, "the circuit to open", func() (bool, string) {
		c := circuit()
		return c == "open", c
	})
	untouched := b.count(t, `SELECT count(*) FROM webhook_ingress.jobs WHERE handler = 'forward' AND attempt_count = 0`)
	if untouched < 7 {
		t.Fatalf("only %d of 10 jobs untouched when the circuit opened after 3 failures", untouched)
	}
	// Open: nothing but one probe a second (an attempt of one job); the
	// waiting jobs spend nothing else.
	attempts := func() int {
		return b.count(t, `SELECT sum(attempt_count) FROM webhook_ingress.jobs WHERE handler = 'forward'`)
	}
	spentBefore, runsBefore := attempts(), runs.Load()
	time.Sleep(2500 * time.Millisecond) // the window in which only probes may run
	probes := int(runs.Load() - runsBefore)
	if probes < 1 || probes > 4 {
		t.Fatalf("%d handler runs in 2.5s of an open circuit with a 1s probe interval, want 1-4 probes", probes)
	}
	if spent := attempts() - spentBefore; spent > probes+1 { // +1: a probe leased at the window's end, not yet run
		t.Fatalf("%d attempts spent in 2.5s of an open circuit by %d probes", spent, probes)
	}
	if c := circuit(); c == "closed" {
		t.Fatalf("circuit closed while every probe failed")
	}
	down.Store(false)
	testwait.Eventually(t, 20*time.Second, "every job completed after the circuit closed", func() (bool, string) {
		n := b.count(t, `SELECT count(*) FROM webhook_ingress.jobs WHERE handler = 'forward' AND status = 'completed'`)
		return n == 10, fmt.Sprintf("%d completed", n)
	})
	if c := circuit(); c != "closed" {
		t.Fatalf("circuit %s after every job completed", c)
	}
	for _, line := range []string{"circuit opened", "circuit closed"} {
		if !strings.Contains(logs.String(), line) {
			t.Errorf("consumer log lacks %q", line)
		}
	}
}
