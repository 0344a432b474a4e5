package admin_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/inlet-dev/inlet/admin"
)

// Unrouted events are listed first by EventTypes, and a handler subscribed
// after they arrived catches them up with an unrouted replay: the dry run
// counts them and changes nothing, the replay creates exactly their jobs
// (not for routed events, nor for those its patterns do not match).
func TestEventTypesAndUnroutedCatchUp(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.subscribe(t, "billing", "stripe", "invoice.*", 3)
	b.insert(t, event{source: "stripe", id: "evt_1", eventType: "invoice.paid", body: []byte("{}")})
	for i := range 3 {
		b.insert(t, event{source: "stripe", id: fmt.Sprintf("evt_c%d", i), eventType: "customer.created", body: []byte("{}")})
	}
	b.insert(t, event{source: "github", id: "gh_1", eventType: "push", body: []byte("{}")})

	types, err := admin.EventTypes(ctx, b.op, 100)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range types {
		got = append(got, fmt.Sprintf("%s/%s:%d/%d:%v", e.Source, e.Type, e.UnroutedEvents, e.Events, e.Unrouted()))
	}
	if want := "[stripe/customer.created:3/3:true github/push:1/1:true stripe/invoice.paid:0/1:false]"; fmt.Sprint(got) != want {
		t.Fatalf("event types %v, want %s", got, want)
	}

	// crm subscribes later to customer.*: three events to catch up.
	b.subscribe(t, "crm", "stripe", "customer.*", 5)
	if types, _ = admin.EventTypes(ctx, b.op, 100); fmt.Sprint(types[0].Handlers) != "[crm]" {
		t.Errorf("handlers now matching customer.created: %v, want [crm]", types[0].Handlers)
	}
	req := admin.ReplayRequest{Handler: "crm", Unrouted: true, DryRun: true}
	before := b.count(t, `SELECT count(*) FROM webhook_ingress.jobs`)
	res, err := admin.Replay(ctx, b.op, req)
	if err != nil || res.Created != 3 || res.Requeued != 0 || !res.DryRun {
		t.Fatalf("dry run: %+v, %v; want 3 to create", res, err)
	}
	if n := b.count(t, `SELECT count(*) FROM webhook_ingress.jobs`); n != before {
		t.Fatalf("the dry run changed the jobs: %d, was %d", n, before)
	}
	req.DryRun = false
	if res, err = admin.Replay(ctx, b.op, req); err != nil || res.Created != 3 {
		t.Fatalf("replay: %+v, %v; want 3 created", res, err)
	}
	if n := b.count(t, `SELECT count(*) FROM webhook_ingress.jobs WHERE handler = 'crm' AND status = 'pending' AND max_attempts = 5`); n != 3 {
		t.Errorf("crm has %d pending jobs, want 3", n)
	}
	// Done: nothing left to catch up for crm; an unknown handler is refused.
	if res, err = admin.Replay(ctx, b.op, admin.ReplayRequest{Handler: "crm", Unrouted: true, DryRun: true}); err != nil || res.Created != 0 {
		t.Errorf("second dry run: %+v, %v; want nothing", res, err)
	}
	_, err = admin.Replay(ctx, b.op, admin.ReplayRequest{Handler: "nobody", Unrouted: true})
	wantErr(t, err, admin.ErrNotFound)
	_, err = admin.Replay(ctx, b.op, admin.ReplayRequest{Handler: "crm", Unrouted: true, DeadLetters: true})
	wantErr(t, err, admin.ErrInvalid)
}
