package admin_test

import (
	"context"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/admin"
)

// TestCatchUpKeyComesFromSubscriptionsThatRouteTheEvent (review helper-149,
// fixed; this describes the code before the fix): catch-up (inlet replay --handler H, and --unrouted) creates a
// filtered subscription's job with the order key max()ed over EVERY enabled
// subscription of the handler whose patterns match the event
// (schema/queries/filters.sql AdminCreateFilteredJobs, the LATERAL "k":
// `WHERE s.handler = $1 AND s.enabled AND <patterns>`), including filtered
// subscriptions whose filter REJECTED the event. missingFiltered
// (admin/replayfilter.go) evaluates each filter and passes only the best
// max_attempts of those that passed, but not which subscriptions passed, so
// the SQL cannot tell. At ingress, fan_out_filtered keys the job from the
// subscriptions that route it only (u.subscription_id: the filters that
// passed) merged with the unfiltered ones; 058's comment on the query says
// catch-up does it "as at fan-out". So the same event gets a different key,
// i.e. a different lane, when caught up than when it arrived: here the
// charge of customer cus_A is put in lane "zz" (the key of a subscription
// that does not route it), so it runs beside cus_A's other jobs, and waits
// behind an unrelated entity's dead letter under order_policy block.
//
// The test stores the same event twice: evt_2 as ingress does (insert +
// fan_out_filtered with the subscriptions whose filters passed): key
// "cus_A"; evt_1 caught up by a replay: key "zz". The key choice predates
// 058 (the LATERAL read every filtered subscription before), but 058
// rewrote this query and documents it as "as at fan-out".
//
// Now: the caught-up job's order_key is that of the subscriptions that
// route the event (here F1's "cus_A"), as at ingress.
func TestCatchUpKeyComesFromSubscriptionsThatRouteTheEvent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	// F1 routes big charges, keyed by customer; F2 (same handler, another
	// team's filter) routes only huge ones, keyed by zone.
	b.exec(t, `INSERT INTO webhook_ingress.subscriptions (handler, provider_pattern, event_type_pattern, max_attempts, filter, order_key)
		VALUES ('ordered', 'stripe', 'charge.*', 5, 'payload.amount > 10000', 'customer'),
		       ('ordered', 'stripe', '*', 5, 'payload.amount > 1000000', 'zone')`)
	b.exec(t, `INSERT INTO webhook_ingress.events
		(provider, scheme, external_event_id, event_type, headers, request_uri, raw_body, payload, signature_verified, secret_index)
		VALUES ('stripe', 'stripe', 'evt_1', 'charge.succeeded', '{}', '/webhooks/stripe', convert_to($1::text, 'UTF8'), $1::text::jsonb, true, 0)`,
		`{"amount":25000,"customer":"cus_A","zone":"zz"}`)
	// The same event at ingress (evt_2): ingress passes fan_out_filtered
	// only the subscriptions whose filter passed (F1), and its job is keyed
	// "cus_A".
	tx, err := b.super.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO webhook_ingress.events
		(provider, scheme, external_event_id, event_type, headers, request_uri, raw_body, payload, signature_verified, secret_index)
		VALUES ('stripe', 'stripe', 'evt_2', 'charge.succeeded', '{}', '/webhooks/stripe', convert_to($1::text, 'UTF8'), $1::text::jsonb, true, 0)`,
		`{"amount":25000,"customer":"cus_A","zone":"zz"}`); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SELECT webhook_ingress.fan_out_filtered('{stripe}', '{evt_2}',
		ARRAY(SELECT id FROM webhook_ingress.subscriptions WHERE order_key = 'customer'))`); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	var ingressKey string
	if err := b.super.QueryRow(ctx, `SELECT coalesce(j.order_key, '<none>') FROM webhook_ingress.jobs j
		JOIN webhook_ingress.events e ON e.id = j.event_id WHERE e.external_event_id = 'evt_2' AND j.handler = 'ordered'`).Scan(&ingressKey); err != nil {
		t.Fatal(err)
	}
	if ingressKey != "cus_A" {
		t.Fatalf("at ingress evt_2's job has key %q, want cus_A (test premise)", ingressKey)
	}

	res, err := admin.Replay(ctx, b.op, admin.ReplayRequest{Handler: "ordered", Provider: "stripe", Since: time.Now().Add(-time.Hour)})
	if err != nil || res.Created != 1 {
		t.Fatalf("replay: %+v, %v; want 1 job created", res, err)
	}
	var key string
	if err := b.super.QueryRow(ctx, `SELECT coalesce(j.order_key, '<none>') FROM webhook_ingress.jobs j JOIN webhook_ingress.events e ON e.id = j.event_id
		WHERE j.handler = 'ordered' AND e.external_event_id = 'evt_1'`).Scan(&key); err != nil {
		t.Fatal(err)
	}
	var lane string
	if err := b.super.QueryRow(ctx, `SELECT coalesce((SELECT l.order_key FROM webhook_ingress.order_lanes l JOIN webhook_ingress.jobs j ON j.id = l.job_id
		JOIN webhook_ingress.events e ON e.id = j.event_id WHERE j.handler = 'ordered' AND e.external_event_id = 'evt_1'), '<none>')`).Scan(&lane); err != nil {
		t.Fatal(err)
	}
	if key != "cus_A" || lane != "cus_A" {
		t.Fatalf("caught-up job of evt_1 has order_key %q, lane %q; want \"cus_A\" (the key of F1, the only subscription whose filter passes; "+
			"F2's filter rejects the event, so its key \"zz\" must not count, as at ingress)", key, lane)
	}
}
