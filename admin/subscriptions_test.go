package admin_test

import (
	"context"
	"errors"
	"testing"

	"github.com/inlet-dev/inlet/admin"
)

// An operator switches off a handler nobody runs any more: new events stop
// getting its jobs, other handlers are unaffected, and it can be switched on
// again. Patterns stay the consumers' to declare.
func TestSubscriptionsCanBeSwitchedOffAndOn(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.subscribe(t, "retired", "stripe", "*", 5)
	b.subscribe(t, "retired", "github", "push", 5)
	b.subscribe(t, "billing", "stripe", "invoice.*", 5)

	subs, err := admin.ListSubscriptions(ctx, b.op, "")
	if err != nil || len(subs) != 3 {
		t.Fatalf("list: %d subscriptions, %v", len(subs), err)
	}
	n, err := admin.SetSubscriptionsEnabled(ctx, b.op, "retired", "github", "push", false)
	if err != nil || n != 1 {
		t.Fatalf("disable one: %d, %v", n, err)
	}
	n, err = admin.SetSubscriptionsEnabled(ctx, b.op, "retired", "", "", false)
	if err != nil || n != 1 { // the other one; the first is already off
		t.Fatalf("disable the rest: %d, %v", n, err)
	}
	b.insert(t, event{source: "stripe", id: "evt_after_retire", eventType: "invoice.paid", body: []byte(`{}`)})
	if got := b.count(t, `SELECT count(*) FROM webhook_ingress.jobs WHERE handler = 'retired'`); got != 0 {
		t.Fatalf("a switched-off handler got %d jobs", got)
	}
	if got := b.count(t, `SELECT count(*) FROM webhook_ingress.jobs WHERE handler = 'billing'`); got != 1 {
		t.Fatalf("billing got %d jobs, want 1", got)
	}
	if n, err := admin.SetSubscriptionsEnabled(ctx, b.op, "retired", "", "", true); err != nil || n != 2 {
		t.Fatalf("enable again: %d, %v", n, err)
	}
	subs, _ = admin.ListSubscriptions(ctx, b.op, "retired")
	for _, s := range subs {
		if !s.Enabled {
			t.Fatalf("still disabled: %+v", s)
		}
	}
	if _, err := admin.SetSubscriptionsEnabled(ctx, b.op, "nobody", "", "", false); !errors.Is(err, admin.ErrNotFound) {
		t.Fatalf("unknown handler: %v", err)
	}
	if _, err := admin.SetSubscriptionsEnabled(ctx, b.op, "retired", "stripe", "", false); !errors.Is(err, admin.ErrInvalid) {
		t.Fatalf("half a pattern pair: %v", err)
	}
}
