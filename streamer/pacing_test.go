package streamer_test

import (
	"context"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/streamer"
)

// TestFirstClaimOfUnpacedHandlerKeepsItsFloor: the first claim of a handler
// without a pace reading keeps at most its floor (the rest given back).
//
// Regression test (review helper-117; fixed by beyondFloor: the text
// describes the behaviour before the fix). A handler the streamer has no pace reading for yet (a handler just
// seen, or every handler right after the streamer starts or restarts) is not
// held to min_leased_per_handler at all: inFlight.capOf gives it the floor,
// but atLimit only moves a handler into the paced "room" claim when its pace
// is measured (streamer/inflight.go, the `!p.measured` skip in atLimit), and
// full() excludes it only once its unextended leases already reach the
// floor. So the main claim (ClaimJobs) leases a whole batch_size of it at
// once. With batch_size 500 and a floor of 32, 500 references wait in the
// bus unextended — the very "backlog leased at once" the pacing was added to
// prevent (docs/pipeline.md: "a burst starts at the floor";
// docs/configuration.md: beyond the floor, only what its consumers start in
// half a lease at its pace).
//
// Expected: after one claim, at most min_leased_per_handler (32) unextended
// leases of the handler. Actual: batch_size (500).
func TestFirstClaimOfUnpacedHandlerKeepsItsFloor(t *testing.T) {
	t.Parallel()
	b := setup(t, "slow")
	b.collect(t, "slow") // takes the references, extends nothing (as the bus holding them)
	b.insertEvents(t, 500)
	const floor = 32
	s := b.newStreamer(t, streamer.Config{ID: "s1", BatchSize: 500, RefsPerMessage: 32, MinLeasedPerHandler: floor,
		LeaseDuration: time.Minute, PollInterval: time.Hour})
	if _, err := s.ClaimOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	unext := b.count(t, `SELECT count(*) FROM webhook_ingress.jobs WHERE handler = 'slow' AND status = 'leased' AND worker_id IS NULL`)
	if unext > floor {
		t.Fatalf("one claim of a handler with no pace reading yet leased %d references nobody extended; want at most min_leased_per_handler (%d)", unext, floor)
	}
}

// TestOrderedHandlerFollowsItsPace: an ordered handler's claim is held to
// the room its pace leaves.
//
// Regression test (review helper-117; fixed: the text describes the
// behaviour before the fix). The pace only limits the batch of handlers that are neither
// ordered nor limited. atLimit (streamer/inflight.go, the loop over f.pace)
// skips every handler already in `all` — which holds every ordered and
// every limited handler — so apart.room is never set for them, and
// claimApart (streamer/apart.go, `batch := min(s.cfg.BatchSize,
// apartBatch)`) claims a whole batch (up to 256) of an ordered (or limited)
// handler whenever its unextended leases are one below its pace cap. An
// ordered handler with many keys (one job per entity: a typical "per
// customer" order key) and a slow consumer thus still gets its backlog
// leased far beyond what it starts in half a lease, the burned-attempts
// problem 1ab5cfb fixed for the other handlers.
//
// Here: lease 1 s, floor 4, batch 100; the handler's pace is read (2 jobs
// ended in ~300 ms: cap 4); its leases are then all extended (no unextended
// left, room 4). Expected: the next claim leases at most 4 (what an
// unordered handler in the same state gets). Actual: 100.
func TestOrderedHandlerFollowsItsPace(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	if _, err := b.admin.Exec(ctx, `INSERT INTO webhook_ingress.subscriptions (handler, order_key, order_policy) VALUES ('ordered', 'data.object.id', 'block')`); err != nil {
		t.Fatal(err)
	}
	if _, err := b.admin.Exec(ctx, `INSERT INTO webhook_ingress.events
		(provider, scheme, external_event_id, event_type, raw_body, payload, occurred_at, signature_verified)
		SELECT 'stripe', 'stripe', 'evt_' || g, 'customer.subscription.updated', convert_to(p::text, 'UTF8'), p, now(), true
		FROM generate_series(1, 600) g, LATERAL (SELECT jsonb_build_object('id', 'evt_' || g, 'data', jsonb_build_object('object', jsonb_build_object('id', 'cus_' || g))) AS p) x`); err != nil {
		t.Fatal(err)
	}
	b.collect(t, "ordered")
	const floor = 4
	s := b.newStreamer(t, streamer.Config{ID: "s1", BatchSize: 100, RefsPerMessage: 4, MinLeasedPerHandler: floor,
		LeaseDuration: time.Second, PollInterval: time.Hour, ReapInterval: time.Hour})
	leasedNow := func() int {
		return b.count(t, `SELECT count(*) FROM webhook_ingress.jobs WHERE handler = 'ordered' AND status = 'leased'`)
	}
	claim := func() {
		t.Helper()
		if _, err := s.ClaimOnce(ctx); err != nil {
			t.Fatal(err)
		}
	}
	claim() // the first claim (no pace yet)
	first := leasedNow()
	time.Sleep(120 * time.Millisecond)
	claim() // recount: the pace's window starts
	// Two of its jobs end; the next recount reads the pace (~7/s: cap = the floor).
	if _, err := b.admin.Exec(ctx, `UPDATE webhook_ingress.jobs SET status = 'completed', lease_expires_at = NULL
		WHERE id IN (SELECT id FROM webhook_ingress.jobs WHERE handler = 'ordered' AND status = 'leased' ORDER BY id LIMIT 2)`); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	claim()
	// Its consumers take (extend) every lease it has: nothing waits in the bus.
	if _, err := b.admin.Exec(ctx, `UPDATE webhook_ingress.jobs SET worker_id = 'w1', lease_expires_at = now() + interval '1 hour'
		WHERE handler = 'ordered' AND status = 'leased'`); err != nil {
		t.Fatal(err)
	}
	before := leasedNow()
	time.Sleep(120 * time.Millisecond)
	claim()
	unext := b.count(t, `SELECT count(*) FROM webhook_ingress.jobs WHERE handler = 'ordered' AND status = 'leased' AND worker_id IS NULL`)
	if unext > floor {
		t.Fatalf("ordered handler at a pace of ~7 jobs/s (lease 1 s, floor %d): one claim left %d references unextended (leased %d first, %d before, %d after); want at most %d",
			floor, unext, first, before, leasedNow(), floor)
	}
}
