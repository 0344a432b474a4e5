package streamer

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// TestLimitedOrderedHandlerBlockedLaneDoesNotSpin: a limited, ordered
// handler whose only due job waits behind its key's head (which failed and
// is retried in an hour) is not claimed again and again.
//
// Regression test (review helper-112; fixed: the text describes the
// behaviour before the fix). In 0c3edb6 LimitedWakeIn (schema/queries/limits.sql) answers 0 —
// "its in-flight limit is full: look again soon" — whenever a due job of the
// handler exists and neither the breaker nor the bucket holds it back. It
// does not know that claim_limited_jobs (041) also holds back a keyed job
// behind an earlier unfinished job of its key (or a leased one). For an
// ordered + limited handler the streamer then re-claims it every limitedWake
// (50 ms; streamer/apart.go claimApart `if heldWake == 0 { heldWake =
// limitedWake }`): one locking claim transaction (LockHandlerLimits FOR
// UPDATE, claim_limited_jobs walking the held backlog, LimitedWakeIn) 20
// times a second, for as long as the lane stays blocked — here the hour of
// the head's backoff (up to 24 h per attempt), with max_in_flight nowhere
// near full and no rate limit at all. The slowApartClaim spacing does not
// catch it (each claim is fast). An unlimited ordered handler in the same
// state is claimed at the poll only.
//
// Expected: with nothing its limits hold back (jobs held by their key's
// order only), LimitedWakeIn is NULL (or the wake is not armed), and the
// handler is claimed at the poll / hints only: a handful of claims in 2 s
// with a 1 h poll, not ~40.
//
// Not parallel: it sets apartClaimStarting.
func TestLimitedOrderedHandlerBlockedLaneDoesNotSpin(t *testing.T) {
	admin, s, _ := apartBundle(t, Config{ID: "s1", LeaseDuration: time.Minute, PollInterval: time.Hour})
	ctx := context.Background()
	if _, err := admin.Exec(ctx, `INSERT INTO webhook_ingress.handler_limits (handler, max_in_flight) VALUES ('ordered', 1000)`); err != nil {
		t.Fatal(err)
	}
	// Two events of one key: the head, then its follower.
	for i, id := range []string{"evt_head", "evt_next"} {
		if _, err := admin.Exec(ctx, `INSERT INTO webhook_ingress.events
			(provider, scheme, external_event_id, event_type, raw_body, payload, signature_verified, received_at)
			VALUES ('stripe', 'stripe', $1, 'invoice.paid', convert_to('{"data":{"object":{"id":"cus_1"}}}', 'UTF8'),
			        '{"data":{"object":{"id":"cus_1"}}}'::jsonb, true, now() + make_interval(secs => $2))`, id, i); err != nil {
			t.Fatal(err)
		}
	}
	// The head failed once and is retried in an hour; the follower is due
	// but waits for it (order policy block).
	tag, err := admin.Exec(ctx, `UPDATE webhook_ingress.jobs j SET status = 'failed', attempt_count = 1, attempted_at = now(),
		next_attempt_at = now() + interval '1 hour', last_error = 'downstream 500', last_error_class = 'handler_error', updated_at = now()
		FROM webhook_ingress.events e WHERE e.id = j.event_id AND e.external_event_id = 'evt_head' AND j.handler = 'ordered'`)
	if err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("fail the head: %v, %v", tag, err)
	}
	var claims atomic.Int64
	apartClaimStarting = func(h string) {
		if h == "ordered" {
			claims.Add(1)
		}
	}
	t.Cleanup(func() { apartClaimStarting = func(string) {} })
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	time.Sleep(500 * time.Millisecond) // the start's rounds and follow-ups
	before := claims.Load()
	const window = 2 * time.Second
	time.Sleep(window)
	n := claims.Load() - before
	var leased int
	if err := admin.QueryRow(ctx, `SELECT count(*) FROM webhook_ingress.jobs WHERE handler = 'ordered' AND status = 'leased'`).Scan(&leased); err != nil {
		t.Fatal(err)
	}
	if leased != 0 {
		t.Fatalf("the follower was leased while its key's head waits: %d leased", leased)
	}
	if n > 5 {
		t.Fatalf("limited ordered handler, its only due job held back by its key's order (head failed, retried in 1 h), "+
			"max_in_flight 1000 with nothing in flight, no rate limit, poll 1 h: claimed %d times in %s (≈ one per %s), want a handful at most",
			n, window, window/time.Duration(max(n, 1)))
	}
}
