package streamer

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inlet-dev/inlet/consumers/bus"
	"github.com/inlet-dev/inlet/internal/database"
	"github.com/inlet-dev/inlet/internal/pgtest"
	"github.com/inlet-dev/inlet/internal/testwait"
)

// wakeTimerBundle is a database with a subscription of each of handlers
// (unordered) and a streamer on it, as apartBundle.
func wakeTimerBundle(t *testing.T, cfg Config, handlers ...string) (*pgxpool.Pool, *Streamer) {
	t.Helper()
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	admin, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admin.Close)
	pool, err := database.Open(ctx, url, database.Options{Role: "webhook_streamer"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	for _, h := range handlers {
		if _, err := admin.Exec(ctx, `INSERT INTO webhook_ingress.subscriptions (handler) VALUES ($1)`, h); err != nil {
			t.Fatal(err)
		}
	}
	ps := bus.NewGoChannel(slog.New(slog.DiscardHandler))
	t.Cleanup(func() { ps.Close() })
	cfg.Pool, cfg.Publisher, cfg.Logger = pool, ps, slog.New(slog.DiscardHandler)
	if cfg.MinLeasedPerHandler == 0 {
		cfg.MinLeasedPerHandler = 1 << 20 // nothing completes: no pace (see newStreamer)
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return admin, s
}

// TestFullInFlightLimitIsReclaimedEvery50ms (review helper-222, fixed).
//
// Defect: docs/pipeline.md ("Rate limits, in-flight limits and circuit
// breakers") promises that a limited handler whose due jobs its limits hold
// back is claimed again "at its next token, its next probe, or 50 ms on
// while its in-flight limit is full". But every round of an apart loop arms
// a timer of its own (streamer/apart.go claimApart: `time.AfterFunc(
// max(heldWake, 5*time.Millisecond), g.wakeUp)`, and `time.AfterFunc(
// limitedWake, g.wakeUp)` after a round that leased), and never stops or
// replaces the timers earlier rounds armed. Each wake-up the loop gets from
// elsewhere (a NOTIFY hint, a poll tick, a follow-up, Wake) starts one
// more self-renewing 50 ms chain, which lives as long as the in-flight limit
// stays full (the usual state of a max_in_flight handler with a backlog: a
// slow downstream). Chains only die when two fire during one round, so
// under ingest hints the loop ends up claiming back to back: each claim is
// a transaction that locks the handler's handler_limits row (FOR UPDATE,
// the same row consumers' breaker writes and the other streamers' claims
// wait for), counts its leases twice and walks its due jobs, 5-10 times
// as often as documented, per streamer, for as long as the limit is full.
// Root cause: streamer/apart.go claimApart (per-round AfterFunc) with
// apartLoop/claimLoop, which never dedupe the timers.
// Setup: handler "capped" with max_in_flight 1 and 20 due jobs; one is
// leased for an hour (nobody completes it), so its in-flight limit stays
// full; poll 1 h; Wake() every 100 ms stands for the writers' NOTIFY hints
// (debounced to one per ~100 ms). Claims of "capped" are counted through
// apartClaimStarting over 3 s.
// Expected: one wake-up 50 ms on (≤ ~20/s) plus one round per hint (10/s):
// about 90 claims in 3 s; the test allows 135 (45/s).
// Observed: 480-620 claims in 3 s (160-210/s; without hints, after 10
// hints 30 ms apart, still 70-110/s a few seconds later, 36-117/s right
// after start from the start's own follow-ups), and the one leased job
// stays the only lease (nothing more could be leased).
// Fixed: one timer per apart group (apartGroup.wakeIn): each round's ask
// Resets it, replacing the one before, and the loop's end stops it.
//
// Not parallel: it sets apartClaimStarting.
func TestFullInFlightLimitIsReclaimedEvery50ms(t *testing.T) {
	admin, s := wakeTimerBundle(t, Config{ID: "s1", LeaseDuration: time.Hour, PollInterval: time.Hour}, "capped")
	ctx := context.Background()
	if _, err := admin.Exec(ctx, `INSERT INTO webhook_ingress.handler_limits (handler, max_in_flight) VALUES ('capped', 1)`); err != nil {
		t.Fatal(err)
	}
	events(t, admin, 20)
	var claims atomic.Int64
	apartClaimStarting = func(h string) {
		if h == "capped" {
			claims.Add(1)
		}
	}
	t.Cleanup(func() { apartClaimStarting = func(string) {} })
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	leased := func() int {
		var n int
		if err := admin.QueryRow(ctx, `SELECT count(*) FROM webhook_ingress.jobs WHERE handler = 'capped' AND status = 'leased'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	testwait.Eventually(t, 30*time.Second, "the in-flight limit full (one job leased)", func() (bool, string) {
		n := leased()
		return n == 1, fmt.Sprintf("%d leased", n)
	})
	// The writers' hints: one wake-up every 100 ms, as while events arrive.
	stop := make(chan struct{})
	hinted := make(chan struct{})
	go func() {
		defer close(hinted)
		tk := time.NewTicker(100 * time.Millisecond)
		defer tk.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tk.C:
				s.Wake()
			}
		}
	}()
	time.Sleep(time.Second) // let the hints run a while
	const window = 3 * time.Second
	before, started := claims.Load(), time.Now()
	time.Sleep(window)
	n, took := claims.Load()-before, time.Since(started)
	close(stop)
	<-hinted
	if l := leased(); l != 1 {
		t.Fatalf("%d jobs of the handler leased, want its max_in_flight of 1", l)
	}
	// A wake-up 50 ms on (20/s) and a round per hint (10/s): 30/s; allow 45/s.
	if limit := int64(45 * took.Seconds()); n > limit {
		t.Fatalf("max_in_flight 1 full with a backlog, a wake-up hint every 100 ms: the handler was claimed %d times in %s (%.0f/s); "+
			"the documented wake-up is 50 ms on while the in-flight limit is full (about 20/s) plus one round per hint (10/s), want at most %d",
			n, took.Round(time.Millisecond), float64(n)/took.Seconds(), limit)
	}
}
