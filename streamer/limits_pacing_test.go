package streamer_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/consumers"
	"github.com/inlet-dev/inlet/internal/database"
	"github.com/inlet-dev/inlet/internal/testlog"
	"github.com/inlet-dev/inlet/streamer"
)

// TestRateLimitPacesAtItsRateNotAtThePollTick: with a backlog, a rate
// limit below the poll's pace leases at its rate.
//
// Regression test (review helper-108; fixed by LimitedWakeIn: the text
// describes the behaviour before the fix). A limited handler whose bucket is empty is not claimed again when
// its next token is due, only at the next wake-up (poll tick, NOTIFY). The
// limited loop re-wakes itself limitedWake (50 ms) after a round that leased
// something (apart.go claimApart: `if limitedLeased > 0 { time.AfterFunc(
// limitedWake, g.wakeUp) }`), and the claim loop's follow-ups run for
// FollowUpFor (100 ms) after the last lease (streamer.go claimLoop); a round
// that leased nothing because the bucket held less than one token schedules
// nothing. When a token takes longer than that to refill (rate below ~10/s)
// and burst is below rate × PollInterval, a backlog drains at burst per
// PollInterval, not at rate: rate_limit 5, burst 1 (an operator asking for
// evenly paced calls) delivers one job per second with the default 1 s poll,
// a fifth of the configured rate, silently (the backlog and the lag grow).
// The code says the opposite: "Tokens refill continuously: look again soon
// rather than at the next poll, so a rate limit paces evenly."
// (TestRateLimitHoldsAcrossStreamers polls every 20 ms, which hides it.)
//
// Expected: with a backlog and no other wake-up, the handler's jobs are
// leased at about its rate (within the documented bound burst + rate·T).
func TestRateLimitPacesAtItsRateNotAtThePollTick(t *testing.T) {
	t.Parallel()
	b := setup(t, "paced")
	ctx := context.Background()
	const rate, burst = 5.0, 1
	b.limits(t, "paced", fmt.Sprintf("rate_per_second = %g, burst = %d, tokens = %d, refilled_at = now()", rate, burst, burst))
	refs := b.collect(t, "paced")
	b.insertEvents(t, 60) // a backlog far beyond what the window can lease
	// Defaults but for the poll interval, set to its default explicitly:
	// no LISTEN, no writer hints; the backlog is already there.
	s := b.newStreamer(t, streamer.Config{PollInterval: time.Second, LeaseDuration: time.Minute})
	start := time.Now()
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	const window = 5 * time.Second
	got := 0
	deadline := time.After(window)
loop:
	for {
		select {
		case <-refs.got:
			got++
			if bound := float64(burst) + rate*time.Since(start).Seconds(); float64(got) > bound+1e-9 {
				t.Fatalf("%d leased within %s: over the bound burst + rate·T", got, time.Since(start))
			}
		case <-deadline:
			break loop
		}
	}
	// burst + rate·T = 26 at most; a streamer pacing at the rate leases
	// about that many. Ask for well under it (60 %): far above the one job
	// per poll tick the streamer leases.
	if want := int(0.6 * rate * window.Seconds()); got < want {
		t.Fatalf("rate_limit %g/s, burst %d, a backlog of 60 jobs: %d leased in %s (about one per %s poll tick), want at least %d (the configured rate; the bound is %g)",
			rate, burst, got, window, time.Second, want, float64(burst)+rate*window.Seconds())
	}
}

// TestMaxInFlightRefillsWhenAJobFinishes: a handler held at max_in_flight
// with a backlog is claimed again soon after a job ends.
//
// Regression test (review helper-108; fixed by LimitedWakeIn: the text
// describes the behaviour before the fix). A handler held at max_in_flight is claimed again only at the next
// wake-up (poll tick, NOTIFY, replication commit of a pending job), not when
// one of its jobs finishes: completions wake nothing (no NOTIFY, and the
// replication wake ignores updates to completed), the limited loop re-wakes
// itself only limitedWake (50 ms) after a round that leased something, and
// follow-ups stop FollowUpFor (100 ms) after the last lease (apart.go
// claimApart, streamer.go claimLoop). A handler whose calls take longer than
// ~100 ms therefore runs max_in_flight jobs per PollInterval, however fast
// its calls finish: max_in_flight 1 and a 250 ms downstream gives one job a
// second with the default 1 s poll, a quarter of what the limit allows,
// while the backlog grows. max_in_flight is documented as a cap on jobs
// leased at once ("at most that many of its jobs leased at once"), not as a
// rate of max_in_flight per poll interval.
//
// Expected: a slot freed by a completion is used again promptly: with a
// backlog, the handler keeps about max_in_flight jobs running, i.e. about
// 1 / 250 ms = 4 jobs/s here.
func TestMaxInFlightRefillsWhenAJobFinishes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	worker, err := database.Open(ctx, b.url, database.Options{Role: "webhook_worker"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(worker.Close)
	const call = 250 * time.Millisecond
	var runs atomic.Int32
	logs := &testlog.Buffer{}
	svc, err := consumers.New(consumers.Config{
		Pool: worker, Subscriber: b.pubsub, WorkerID: "w1",
		Logger: slog.New(slog.NewTextHandler(logs, nil)),
		Handlers: []consumers.Handler{{
			Name: "capped", MaxInFlight: 1,
			Func: func(context.Context, *consumers.Event) error {
				time.Sleep(call) // a downstream that answers in 250 ms
				runs.Add(1)
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
	b.insertEvents(t, 60)
	// A 10 s poll: one job per poll tick would be one job in the window, so
	// the bound below can leave a loaded machine room (11 of 24 ran once
	// on a loaded CI, against a bound of 12 with a 1 s poll).
	const poll = 10 * time.Second
	s := b.newStreamer(t, streamer.Config{PollInterval: poll, LeaseDuration: time.Minute})
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	const window = 6 * time.Second
	time.Sleep(window)
	done := int(runs.Load())
	// At most window / call = 24 with one at a time; ask for a quarter of
	// it, far above the one per poll tick it runs without the refill.
	if want := int(window / call / 4); done < want {
		t.Fatalf("max_in_flight 1, calls of %s, a backlog of 60 jobs: %d jobs ran in %s (one per %s poll tick would be 1), want at least %d (one at a time back to back allows %d)",
			call, done, window, poll, want, int(window/call))
	}
}
