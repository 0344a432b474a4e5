package admin_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/inlet-dev/inlet/admin"
)

// TestReviewUnroutedCatchUpOfSecondHandlerCreatesNothing (review helper-120).
//
// Defect: two handlers subscribe after events of a type nobody routed
// arrived. inlet events types lists both as "HANDLERS NOW" of the unrouted
// type and prints, for each, "handler X now matches earlier unrouted events:
// inlet replay --handler X --unrouted --dry-run"; both dry runs say 3 jobs
// to create. The operator runs the first handler's catch-up (3 created),
// then the second's: it creates 0 and reports success ("replayed 0 jobs"),
// because AdminCreateUnroutedJobs / AdminCountUnroutedJobs (and
// AdminMissingFilteredCandidates with unrouted) keep only events with "no
// job at all" — and the first handler's catch-up job now counts as one. The
// second handler silently never gets the events, and the dry run it was
// shown (3) is not what its run does (0). Run at the same moment by two
// operators (READ COMMITTED, neither sees the other's uncommitted jobs),
// both get all 3: the outcome depends on timing.
//
// Expected: each handler the listing names gets its jobs for the events
// that were unrouted at arrival, whatever order the catch-ups run in; a dry
// run followed by its run agree.
//
// Root cause: schema/queries/eventtypes.sql AdminCountUnroutedJobs /
// AdminCreateUnroutedJobs `NOT EXISTS (SELECT 1 FROM jobs j WHERE
// j.event_id = e.id AND j.event_received_at = e.received_at)` (and
// schema/queries/filters.sql AdminMissingFilteredCandidates' same clause):
// "unrouted" is judged by the jobs there are now, not by what fan-out did
// at arrival.
//
// Suggested fix: judge "unrouted at arrival" by jobs fan-out created, e.g.
// ignore jobs a replay created (they carry the attempt-0 'replayed' history
// row, or add a created_by_replay flag), and require only that the event has
// no job of this handler (as AdminCreateMissingJobs does).
func TestReviewUnroutedCatchUpOfSecondHandlerCreatesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	for i := range 3 {
		b.insert(t, event{source: "stripe", id: fmt.Sprintf("evt_c%d", i), eventType: "customer.created", body: []byte("{}")})
	}
	if _, err := admin.EventTypes(ctx, b.op, 100); err != nil {
		t.Fatal(err)
	}
	// Two handlers subscribe later to customer.*.
	b.subscribe(t, "crm", "stripe", "customer.*", 5)
	b.subscribe(t, "analytics", "stripe", "customer.*", 5)
	types, err := admin.EventTypes(ctx, b.op, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(types) != 1 || types[0].UnroutedEvents != 3 || fmt.Sprint(types[0].Handlers) != "[analytics crm]" {
		t.Fatalf("event types: %+v, want customer.created with 3 unrouted and handlers [analytics crm]", types)
	}
	// Both dry runs, as the listing advises.
	for _, h := range []string{"crm", "analytics"} {
		res, err := admin.Replay(ctx, b.op, admin.ReplayRequest{Handler: h, Unrouted: true, DryRun: true})
		if err != nil || res.Created != 3 {
			t.Fatalf("%s --unrouted --dry-run: %+v, %v; want 3 to create", h, res, err)
		}
	}
	// Then both runs, one after the other.
	res, err := admin.Replay(ctx, b.op, admin.ReplayRequest{Handler: "crm", Unrouted: true})
	if err != nil || res.Created != 3 {
		t.Fatalf("crm --unrouted: %+v, %v; want 3 created", res, err)
	}
	res, err = admin.Replay(ctx, b.op, admin.ReplayRequest{Handler: "analytics", Unrouted: true})
	if err != nil {
		t.Fatal(err)
	}
	n := b.count(t, `SELECT count(*) FROM webhook_ingress.jobs WHERE handler = 'analytics'`)
	if res.Created != 3 || n != 3 {
		t.Fatalf("analytics --unrouted after crm's catch-up: created %d (its dry run said 3), analytics has %d jobs, want 3: "+
			"the second handler the listing named never gets the events that were unrouted at arrival", res.Created, n)
	}
}
