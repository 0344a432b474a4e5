package ingress_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/inlet-dev/inlet/ingress"
)

// A handler subscribed both without a filter and with one (two services
// sharing a handler name, as Register allows) gets, for an event both route,
// the largest max_attempts and the key of either, as when both are
// unfiltered (migration 058).
//
// Regression test (review helper-140, fixed; this describes the code before
// the fix): the insert's trigger wrote the job from the unfiltered
// subscriptions alone, then fan_out_filtered's insert for the filtered one
// met it and did nothing (ON CONFLICT DO NOTHING), so the filtered
// subscription's max_attempts and order key were dropped: the big charges,
// given 20 attempts, were dead-lettered after 3. Catch-up did the same
// (admin: TestReplayPlanCountsAJobOfTwoMatchingSubscriptionsOnce).
func TestFilteredAndUnfilteredSubscriptionMaxAttempts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	admin, single, group := filterStores(t, `
		('billing', 'stripe', '*', NULL),
		('billing', 'stripe', 'charge.*', 'payload.data.object.amount > 10000')`)
	if _, err := admin.Exec(ctx, `UPDATE webhook_ingress.subscriptions
		SET max_attempts = CASE WHEN filter IS NULL THEN 3 ELSE 20 END WHERE handler = 'billing'`); err != nil {
		t.Fatal(err)
	}
	if _, err := single.Insert(ctx, charge("evt_big_single", 25000)); err != nil {
		t.Fatal(err)
	}
	if _, err := group.Insert(ctx, charge("evt_big_group", 25000)); err != nil {
		t.Fatal(err)
	}
	if _, err := group.Insert(ctx, charge("evt_small", 500)); err != nil {
		t.Fatal(err)
	}
	rows, err := admin.Query(ctx, `SELECT e.external_event_id, j.max_attempts
		FROM webhook_ingress.jobs j JOIN webhook_ingress.events e ON e.id = j.event_id
		WHERE j.handler = 'billing' ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	got := map[string]int32{}
	for rows.Next() {
		var id string
		var n int32
		if err := rows.Scan(&id, &n); err != nil {
			t.Fatal(err)
		}
		got[id] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]int32{"evt_big_single": 20, "evt_big_group": 20, "evt_small": 3} {
		n, ok := got[id]
		switch {
		case !ok:
			t.Errorf("%s: no job of billing", id)
		case n != want:
			t.Errorf("%s: job of billing has max_attempts %d, want %d (the largest of the subscriptions that route it: unfiltered 3, filtered and passed 20)", id, n, want)
		}
	}
}

// The filtered subscription's order key reaches the job the unfiltered one's
// trigger wrote, and the job joins its key's lane (order_lanes), on both
// store paths.
func TestFilteredSubscriptionsOrderKeyMergesIntoTheUnfilteredJob(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	admin, single, group := filterStores(t, `
		('ordered', 'stripe', '*', NULL),
		('ordered', 'stripe', 'charge.*', 'payload.data.object.amount > 10000')`)
	if _, err := admin.Exec(ctx, `UPDATE webhook_ingress.subscriptions SET order_key = 'id' WHERE handler = 'ordered' AND filter IS NOT NULL`); err != nil {
		t.Fatal(err)
	}
	for _, store := range []interface {
		Insert(context.Context, *ingress.Event) (bool, error)
	}{single, group} {
		e := charge(fmt.Sprintf("evt_key_%T", store), 25000)
		e.StoreJSON = true // the key is read from the payload copy
		if _, err := store.Insert(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	small := charge("evt_key_small", 500)
	small.StoreJSON = true
	if _, err := group.Insert(ctx, small); err != nil {
		t.Fatal(err)
	}
	rows, err := admin.Query(ctx, `SELECT e.external_event_id, coalesce(j.order_key, ''), j.order_at IS NOT NULL,
			EXISTS (SELECT 1 FROM webhook_ingress.order_lanes l WHERE l.job_id = j.id AND l.order_key = j.order_key AND l.order_at = j.order_at)
		FROM webhook_ingress.jobs j JOIN webhook_ingress.events e ON e.id = j.event_id
		WHERE j.handler = 'ordered' ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var id, key string
		var at, lane bool
		if err := rows.Scan(&id, &key, &at, &lane); err != nil {
			t.Fatal(err)
		}
		n++
		switch {
		case id == "evt_key_small" && (key != "" || at || lane):
			t.Errorf("%s (filter missed): key %q, order_at %v, lane %v; want the unfiltered subscription's job, keyless", id, key, at, lane)
		case id != "evt_key_small" && (key != id || !at || !lane):
			t.Errorf("%s: key %q, order_at set %v, in its lane %v; want key %q, a time and a lane row", id, key, at, lane, id)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if n != 3 {
		t.Fatalf("%d jobs of ordered, want 3", n)
	}
}
