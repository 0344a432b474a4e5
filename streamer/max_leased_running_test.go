package streamer_test

import (
	"context"
	"testing"

	"github.com/inlet-dev/inlet/streamer"
)

// TestMaxLeasedPerHandlerCountsRunningAttempts: guarantee
// (docs/pipeline.md, Streamer: "A handler with max_leased_per_handler jobs
// in flight, or with no live consumer, gets no more leases"; "Extended
// leases (attempts running) do not count [toward the pace], so a handler of
// long jobs runs as many as its consumers take" — up to
// max_leased_per_handler, the hard ceiling on a handler's leases). A
// handler whose max_leased_per_handler leases are all running (extended by
// its consumers) gets no further lease, however much room its pace leaves.
//
// Mutant (helper-238): streamer/inflight.go:314, inFlight.full,
// `if n >= f.limit || f.unext[h] >= f.capOf(h) {` changed to
// `if (n >= f.limit && false) || f.unext[h] >= f.capOf(h) {`: the hard
// limit ignored, only the pace cap on unextended leases held. The whole
// streamer package (with -race) and the pacing tests of tests/ passed:
// TestMaxLeasedPerHandlerStopsLeasingAhead has nobody extend its leases,
// so every lease is unextended and the pace cap (itself at most the limit)
// stops the claims alike; no test had a handler at its limit with its
// leases extended. With the mutant every claim round leased more of the
// handler past max_leased_per_handler (here 50 running, and more leased
// on top), the backlog a slow or hung handler's consumers cannot take.
func TestMaxLeasedPerHandlerCountsRunningAttempts(t *testing.T) {
	t.Parallel()
	b := setup(t, "slow")
	ctx := context.Background()
	b.insertEvents(t, 80)
	// 50 of its jobs are running: leased (by another streamer) and
	// extended by the consumer running them (worker_id set).
	if _, err := b.admin.Exec(ctx, `UPDATE webhook_ingress.jobs
		SET status = 'leased', attempt_count = 1, attempted_at = now(), lease_holder_id = 'other-streamer',
		    lease_expires_at = now() + interval '1 hour', worker_id = 'busy-consumer', updated_at = now()
		WHERE id IN (SELECT id FROM webhook_ingress.jobs WHERE handler = 'slow' ORDER BY id LIMIT 50)`); err != nil {
		t.Fatal(err)
	}
	if n := b.count(t, `SELECT count(*) FROM webhook_ingress.jobs WHERE handler = 'slow' AND status = 'pending'`); n != 30 {
		t.Fatalf("%d pending jobs of slow, want 30", n)
	}
	s := b.newStreamer(t, streamer.Config{BatchSize: 25, MaxLeasedPerHandler: 50})
	for range 10 {
		if _, err := s.ClaimOnce(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n := b.count(t, `SELECT count(*) FROM webhook_ingress.jobs WHERE handler = 'slow' AND status = 'leased'`); n != 50 {
		t.Fatalf("slow handler has %d jobs leased with its 50 running, want 50: max_leased_per_handler 50 did not hold "+
			"once its leases were extended", n)
	}
}
