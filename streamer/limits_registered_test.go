package streamer_test

import (
	"context"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/schema/queries"
	"github.com/inlet-dev/inlet/streamer"
)

// TestLimitsRegisteredBetweenRecountsHold (review helper-139, fixed by 061;
// this describes the code before the fix):
//
// Before the fix: a handler's limits do not hold until each streamer's next
// recount after a consumer registers them. The streamer learns which
// handlers are limited only from ListLimitedHandlers in inFlight.recount
// (streamer/inflight.go recount, every LeasedRecount, default 100 ms) and
// until then claims the handler in the main claim, ClaimJobs
// (claim_jobs, migration 026/052), which never looks at handler_limits:
// it leases up to a whole batch of the handler's jobs at once, whatever
// max_in_flight, rate_limit/burst or an open circuit say. A consumer that
// starts with max_in_flight 1 (its Register writes handler_limits with its
// subscriptions) in front of a fragile downstream gets every due job of the
// handler leased at once by every streamer whose list is older than the
// registration. docs/pipeline.md: "at most that many of its jobs leased at
// once, across every replica"; "a limited handler is claimed apart from the
// others".
//
// Here: a streamer claims (its recount lists no limited handler); then a
// consumer registers max_in_flight 1 for handler "capped" (the
// UpsertHandlerLimits a consumer's Register runs) and 20 of its jobs come
// due; the streamer claims again. LeasedRecount is a minute so the result
// does not depend on how fast this machine runs the two claims: with the
// default 100 ms the same happens whenever the second claim falls inside
// the 100 ms after the first (on every streamer, each with its own
// window).
//
// Now: 1 job of "capped" leased (its max_in_flight).
// Before: 20.
func TestLimitsRegisteredBetweenRecountsHold(t *testing.T) {
	t.Parallel()
	b := setup(t, "capped")
	ctx := context.Background()
	s := b.newStreamer(t, streamer.Config{ID: "s0", LeaseDuration: time.Minute, LeasedRecount: time.Minute})
	if _, err := s.ClaimOnce(ctx); err != nil { // its recount: nothing limited yet
		t.Fatal(err)
	}
	one := int32(1)
	if _, err := queries.New(b.admin).UpsertHandlerLimits(ctx, queries.UpsertHandlerLimitsParams{Handler: "capped", MaxInFlight: &one}); err != nil {
		t.Fatal(err)
	}
	b.insertEvents(t, 20)
	if _, err := s.ClaimOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if n := b.count(t, `SELECT count(*) FROM webhook_ingress.jobs WHERE handler = 'capped' AND status = 'leased'`); n > 1 {
		t.Fatalf("%d jobs of handler \"capped\" leased at once, its max_in_flight is 1 (registered before its jobs came due): "+
			"the streamer's main claim (ClaimJobs) leased them, its list of limited handlers being older than the registration", n)
	}
}
