package admin_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"testing"

	"github.com/inlet-dev/inlet/admin"
)

// Regression test for a defect found by review helper-94 (fixed; the text below
// describes the behaviour before the fix).
//
// TestWhereABooleanFieldPathIsItsAnswer: a --where / ?where= path that selects a
// single boolean field ('$.livemode', Stripe's flag on every event;
// '$.data.object.paid') is refused since e673620 as "not a predicate",
// though PostgreSQL's @@ answers such a path with the field's value (true
// for {"livemode": true}) and the list matched those events before the
// change: a regression of a working filter.
//
// Expected: the path is run, and the events whose field is true are listed
// (evt_live only).
//
// Root cause: admin/events.go checkPredicate evaluates the path with
// jsonb_path_match on '{}' and takes SQLSTATE 22038 (no single boolean) as
// "not a predicate"; on an empty document a boolean field's path selects
// nothing, so it is refused, whatever the real payloads hold.
func TestWhereABooleanFieldPathIsItsAnswer(t *testing.T) {
	t.Parallel()
	b := setupAPI(t)
	for _, e := range []struct{ id, body string }{
		{"evt_live", `{"livemode":true,"data":{"object":{"paid":true}}}`},
		{"evt_test", `{"livemode":false,"data":{"object":{"paid":false}}}`},
	} {
		if _, err := b.super.Exec(context.Background(), `INSERT INTO webhook_ingress.events
			(provider, scheme, external_event_id, event_type, raw_body, signature_verified, payload)
			VALUES ('stripe', 'stripe', $1, 'charge.succeeded', $2, true, convert_from($2, 'UTF8')::jsonb)`,
			e.id, []byte(e.body)); err != nil {
			t.Fatal(err)
		}
	}
	// What PostgreSQL's @@ itself answers for the path: the live event.
	var direct []string
	rows, err := b.super.Query(context.Background(),
		`SELECT external_event_id FROM webhook_ingress.events WHERE payload @@ '$.livemode' ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var s string
		_ = rows.Scan(&s)
		direct = append(direct, s)
	}
	rows.Close()
	if !slices.Equal(direct, []string{"evt_live"}) {
		t.Fatalf("premise: payload @@ '$.livemode' = %v", direct)
	}
	for _, where := range []string{`$.livemode`, `$.data.object.paid`, `lax $.livemode`} {
		page, err := admin.ListEvents(context.Background(), b.op, admin.EventFilter{Where: where})
		var got []string
		for _, e := range page.Events {
			got = append(got, e.ExternalEventID)
		}
		if err != nil || !slices.Equal(got, []string{"evt_live"}) {
			t.Errorf("events list --where %q: %v, %v; want [evt_live] (as payload @@ %q answers)", where, got, err, where)
		}
	}
	code, _, body := b.call(t, "GET", "/api/events?where="+url.QueryEscape(`$.livemode`), "")
	var page admin.EventPage
	if err := json.Unmarshal(body, &page); code != http.StatusOK || err != nil || len(page.Events) != 1 {
		t.Errorf("GET /api/events?where=$.livemode: %d %s; want 200 with evt_live", code, body)
	}
}
