package admin_test

import (
	"context"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/admin"
)

// TestUnroutedEventCaughtUpBeforeTheFoldStaysUnrouted (review helper-178,
// fixed; this describes the code before the fix): an event that created no
// job when it arrived is counted unrouted by the fold (event_types,
// inlet_events_unrouted_total, inlet events types) even when a catch-up gave
// it a job before the fold ran, and a handler subscribed later still
// catches it up with --unrouted.
//
// Defect: whether an event was routed was judged when the arrivals are
// folded (every heartbeat.types_every, 10 s, in the streamer, or at inlet
// events types), by "does it have any job now" (fold_event_types in
// schema/migrations/013_event_types.up.sql, the CTE x: `EXISTS (SELECT 1
// FROM webhook_ingress.jobs j WHERE j.event_id = u.id …) AS routed`). A job
// a catch-up created after the event arrived (inlet replay --handler B
// --since …, or POST /api/replay, neither of which folds first) counted as
// routing it when the catch-up ran before the fold. The event created no
// job when it arrived, yet:
//   - event_types counted it routed (unrouted_events 0, no
//     first_unrouted_at): inlet_events_unrouted_total never counted it and
//     inlet events types showed its type routed — the event that "creates
//     zero jobs must never be silent" (issue 19 §4) was silent;
//   - a handler C subscribed later got nothing from inlet replay
//     --handler C --unrouted, because AdminCountUnroutedJobs /
//     AdminCreateUnroutedJobs start from event_types rows with
//     unrouted_events > 0 — while the same catch-up run after a fold
//     (the docs: "several handlers subscribed later each catch them up,
//     in any order") created C's job.
//
// The same history gave a different answer depending only on whether the
// streamer's fold tick fell between the arrival and B's catch-up. This
// test failed so before the fix (unrouted_events 0; C's catch-up created
// 0 jobs). Fixed by migration 068_fold_ignores_catch_up_jobs: the fold
// passes over a job with the catch-up's 'replayed' attempt-0 row, as the
// unrouted queries do.
func TestUnroutedEventCaughtUpBeforeTheFoldStaysUnrouted(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()

	// A type nobody routes arrives: no job.
	ev := b.insert(t, event{source: "stripe", id: "evt_new_type", eventType: "invoice.voided", body: []byte(`{"id":"evt_new_type"}`)})
	if n := b.count(t, `SELECT count(*) FROM webhook_ingress.jobs WHERE event_id = $1`, ev); n != 0 {
		t.Fatalf("setup: the event has %d jobs at arrival, want 0", n)
	}

	// Billing subscribes and catches up with a filtered replay (not
	// --unrouted), before the streamer's next fold.
	b.subscribe(t, "billing", "stripe", "invoice.*", 3)
	res, err := admin.Replay(ctx, b.op, admin.ReplayRequest{Handler: "billing", Provider: "stripe", Since: time.Now().Add(-time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if res.Created != 1 {
		t.Fatalf("setup: billing's catch-up created %d jobs, want 1", res.Created)
	}

	// The fold runs (the streamer's tick, or inlet events types).
	types, err := admin.EventTypes(ctx, b.op, 100)
	if err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, ty := range types {
		if ty.Source == "stripe" && ty.Type == "invoice.voided" {
			found = true
			if ty.UnroutedEvents != 1 {
				t.Errorf("event_types stripe/invoice.voided: unrouted_events %d, want 1 (its only event created no job when it arrived; "+
					"a later catch-up's job does not route it at arrival)", ty.UnroutedEvents)
			}
		}
	}
	if !found {
		t.Fatalf("stripe/invoice.voided not listed by EventTypes: %+v", types)
	}

	// Audit subscribes later and catches up the unrouted events.
	b.subscribe(t, "audit", "stripe", "*", 3)
	dry, err := admin.Replay(ctx, b.op, admin.ReplayRequest{Handler: "audit", Unrouted: true, DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	res, err = admin.Replay(ctx, b.op, admin.ReplayRequest{Handler: "audit", Unrouted: true})
	if err != nil {
		t.Fatal(err)
	}
	if n := b.count(t, `SELECT count(*) FROM webhook_ingress.jobs WHERE event_id = $1 AND handler = 'audit'`, ev); n != 1 || res.Created != 1 {
		t.Errorf("inlet replay --handler audit --unrouted: created %d (dry run %d), audit has %d jobs of the event; want 1: "+
			"the event created no job when it arrived", res.Created, dry.Created, n)
	}
}
