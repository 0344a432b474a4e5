package admin_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/inlet-dev/inlet/admin"
)

// Every handler subscribed after unrouted events arrived catches them up,
// in whichever order the catch-ups run.
//
// Regression test (review helper-120; fixed: the text describes the
// behaviour before the fix). Two handlers subscribe after events of a type
// nobody routed arrived. inlet events types lists both as handlers of the
// unrouted type and suggests `inlet replay --handler X --unrouted` for each;
// both dry runs say 3 jobs to create. The first handler's catch-up created
// 3, the second's then 0 and reported success: the queries kept only events
// with "no job at all", and the first catch-up's jobs counted as routing.
// "Unrouted" is now judged by the jobs made when the events arrived (a
// catch-up's jobs carry a 'replayed' row of attempt 0 written with them).
//
// Expected: each handler the listing names gets its jobs for the events
// that were unrouted at arrival, whatever order the catch-ups run in; a dry
// run followed by its run agree.
//
// Cause: schema/queries/eventtypes.sql AdminCountUnroutedJobs /
// AdminCreateUnroutedJobs `NOT EXISTS (SELECT 1 FROM jobs j WHERE
// j.event_id = e.id AND j.event_received_at = e.received_at)` (and
// schema/queries/filters.sql AdminMissingFilteredCandidates' same clause):
// "unrouted" is judged by the jobs there are now, not by what fan-out did
// at arrival.
func TestUnroutedCatchUpOfASecondHandler(t *testing.T) {
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
