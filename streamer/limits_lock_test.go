package streamer_test

import (
	"context"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/streamer"
)

// TestLockedLimitsRowDoesNotStallTheOtherLimitedHandlers (review helper-87).
//
// Defect: a limited handler's claim (claimLimited: LockHandlerLimits, then
// claim_limited_jobs) waits for its handler_limits row lock without bound
// but the claim's own 10 s deadline (claimRoundTimeout). The row is locked
// by every consumer failure of a handler with a breaker (HandlerFailed runs
// in the FailJob transaction, consumers/attempt.go record), so a consumer
// cut off from PostgreSQL between that statement and its COMMIT holds it
// until the server notices the dead connection (TCP keepalive: up to hours;
// the case review helper-79 proved for job rows). All limited handlers of a
// streamer are claimed one after another in one loop (apart.go
// claimApart), so while that row is held every round of the loop waits 10 s
// on that one handler before reaching the others; the failed claim is then
// paced by claimFailed's backoff, 100 ms doubling to at most 5 s, shorter
// than the 10 s it costs, so the loop stays stuck about two thirds of the
// time for good: another limited handler's new jobs wait up to 10 s each,
// whatever PollInterval says.
//
// Expected (apart.go apartPace: "one handler's failing claims (a database
// without 031, a statement timeout) hold up no other"; docs/pipeline.md:
// per-handler isolation, guarantee 3): handler beta's jobs are leased
// within a poll interval or so while handler alpha's limits row is locked
// by someone else.
func TestLockedLimitsRowDoesNotStallTheOtherLimitedHandlers(t *testing.T) {
	t.Parallel()
	b := setup(t, "alpha", "beta")
	ctx := context.Background()
	b.limits(t, "alpha", "max_in_flight = 1000")
	b.limits(t, "beta", "max_in_flight = 1000")
	// A consumer of alpha recorded a failure (HandlerFailed locked alpha's
	// row) and was cut off before its COMMIT: the row stays locked.
	tx, err := b.admin.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `SELECT FROM webhook_ingress.handler_limits WHERE handler = 'alpha' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}

	c := b.collect(t, "beta")
	s := b.newStreamer(t, streamer.Config{PollInterval: 50 * time.Millisecond, LeaseDuration: time.Minute})
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = tx.Rollback(ctx) // so Stop does not wait for the claim blocked on the row
		s.Stop()
	})

	// An event every 2 s for 16 s; each gives beta a job (and alpha one).
	const events = 8
	var worst time.Duration
	slow := 0
	for i := range events {
		start := time.Now()
		b.insertEvents(t, 1)
		select {
		case <-c.got:
		case <-time.After(15 * time.Second):
			t.Fatalf("beta's job of event %d not published within 15s", i)
		}
		took := time.Since(start)
		worst = max(worst, took)
		if took > 2*time.Second {
			slow++
		}
		time.Sleep(max(2*time.Second-took, 0))
	}
	if slow > 0 {
		t.Fatalf("%d of beta's %d jobs waited more than 2s to be published (the worst %s, PollInterval 50ms) while "+
			"another handler's (alpha's) limits row was locked: the limited loop waits for alpha's row on every claim of it",
			slow, events, worst.Round(10*time.Millisecond))
	}
}
