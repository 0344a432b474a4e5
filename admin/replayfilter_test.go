package admin_test

import (
	"context"
	"strings"
	"testing"

	"github.com/inlet-dev/inlet/admin"
	"github.com/inlet-dev/inlet/ingress"
	"github.com/inlet-dev/inlet/internal/database"
	"github.com/inlet-dev/inlet/schema"
)

// A handler's catch-up (inlet replay --handler H --source S) must create
// jobs "only for events one of the handler's enabled subscriptions matches,
// exactly as fan-out would have" (package doc), evaluating "the same
// filters on the stored bytes" (docs/pipeline.md). Ingress evaluates a
// filter with payload null when the body is over 1 MiB (filter.MaxPayload).
// The catch-up parsed the body whatever its size, so an event the filter
// rejected at arrival (stored through ingress's own write path, as ingress
// or inlet backfill store it) got a job from the replay (a review proved
// it); both now build the payload with filter.ParsePayload.
func TestCatchUpFiltersLargeBodiesAsFanOutDoes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.exec(t, `INSERT INTO webhook_ingress.subscriptions (handler, provider_pattern, event_type_pattern, max_attempts, filter)
		VALUES ('big', 'stripe', 'charge.*', 5, 'payload.data.object.amount > 10000')`)

	pool, err := database.Open(ctx, b.url, database.Options{Role: schema.IngressRole, MaxConns: 2, AppName: "replayfilter-test-ingress"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	store := ingress.NewPGStore(pool, nil)

	small := []byte(`{"data":{"object":{"amount":25000}}}`)
	large := []byte(`{"data":{"object":{"amount":25000}},"pad":"` + strings.Repeat("x", 1<<20) + `"}`)
	for _, e := range []*ingress.Event{
		{Provider: "stripe", Scheme: "stripe", ExternalID: "evt_small", EventType: "charge.succeeded",
			Headers: map[string][]string{}, RequestURI: "/webhooks/stripe", RawBody: small, Verified: true},
		{Provider: "stripe", Scheme: "stripe", ExternalID: "evt_large", EventType: "charge.succeeded",
			Headers: map[string][]string{}, RequestURI: "/webhooks/stripe", RawBody: large, Verified: true},
	} {
		if stored, err := store.Insert(ctx, e); err != nil || !stored {
			t.Fatalf("store %s: stored %v, %v", e.ExternalID, stored, err)
		}
	}
	jobsOf := func() string {
		t.Helper()
		var got string
		if err := b.super.QueryRow(ctx, `SELECT coalesce(string_agg(e.external_event_id, ',' ORDER BY e.external_event_id), '')
			FROM webhook_ingress.jobs j JOIN webhook_ingress.events e ON e.id = j.event_id WHERE j.handler = 'big'`).Scan(&got); err != nil {
			t.Fatal(err)
		}
		return got
	}
	// What fan-out decided at arrival: the large body's filter saw payload null.
	if got := jobsOf(); got != "evt_small" {
		t.Fatalf("after ingest, big's jobs: %q, want evt_small (ingress filters a body over 1 MiB with payload null)", got)
	}

	plan, err := admin.Replay(ctx, b.op, admin.ReplayRequest{Handler: "big", Provider: "stripe", DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	res, err := admin.Replay(ctx, b.op, admin.ReplayRequest{Handler: "big", Provider: "stripe"})
	if err != nil {
		t.Fatal(err)
	}
	if plan.Created != 0 || res.Created != 0 || jobsOf() != "evt_small" {
		t.Fatalf("catch-up planned %d and created %d jobs, big's jobs now %q: it created a job for an event the same filter "+
			"rejected at fan-out (want 0 created, jobs evt_small)", plan.Created, res.Created, jobsOf())
	}
}
