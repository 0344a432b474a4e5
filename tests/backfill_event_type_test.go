package tests

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/ingress/verify"
	"github.com/inlet-dev/inlet/internal/pgtest"
)

// TestBackfillStoresTheSourcesEventType: a backfilled event gets the type
// ingress gives the same bytes from the source (event_type_json), and so
// its handler's job.
//
// Regression test (review helper-107; fixed by verify.NewEventTypeOf: the
// text describes the behaviour before the fix). inlet backfill (and inlet
// reconcile, which shares the listers) ignored a source's event_type_json / event_type_header. The docs
// say "Any source can take its id or type elsewhere" (docs/providers.md) and
// inlet backfill --help says "Each event is stored as ingress stores a
// webhook ... a new one gets a job for each subscribed handler". For a
// Stripe source configured with event_type_json: data.object.object, ingress
// stores a webhook's type as "invoice"; the backfill stores the same event
// with Stripe's own "type" ("invoice.paid"). The subscription written for the
// source's types (stripe / invoice) then gets no job for the backfilled
// event: the handler silently never sees an event the backfill reports as
// stored, and inlet events types shows a type ingress never produces.
//
// backfill.CheckSourceIDs refuses a source keyed by an id of its own for the
// same reason (cmd/inlet/backfill.go backfillSource → ownIDs), but nothing
// checks the type settings: backfill.Run (backfill/backfill.go, the
// cfg.Store.Insert call) stores it.Type, read by stripe.go's page / github.go's
// delivery from the provider's own field, whatever the source says.
//
// Expected: the backfilled event has the type ingress would give the same
// bytes (and so its handler's job), or the backfill is refused with a usage
// error naming event_type_json, as a custom id is.
func TestBackfillStoresTheSourcesEventType(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	env := cleanEnv("DATABASE_URL=" + url)

	const secret = "whsec_review_eventtype"
	body := fmt.Sprintf(`{"id":"evt_review_type_1","object":"event","type":"invoice.paid","created":%d,"data":{"object":{"object":"invoice","id":"in_1"}}}`,
		time.Now().Add(-time.Hour).Unix())

	// What ingress stores as the type of these bytes for this source.
	srcCfg := verify.Config{Type: "stripe", Secrets: []string{secret}, EventTypeJSON: "data.object.object"}
	v, err := verify.New(srcCfg)
	if err != nil {
		t.Fatal(err)
	}
	res, err := v.Verify(&verify.Request{Header: verify.SignStripe(secret, time.Now(), []byte(body)), Body: []byte(body)})
	if err != nil {
		t.Fatal(err)
	}
	if res.EventType != "invoice" {
		t.Fatalf("ingress's type for the source is %q, want invoice (test setup)", res.EventType)
	}

	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `INSERT INTO webhook_ingress.subscriptions (handler, provider_pattern, event_type_pattern)
		VALUES ('invoices', 'stripe', 'invoice')`); err != nil {
		t.Fatal(err)
	}

	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"object":"list","data":[%s],"has_more":false}`, body)
	}))
	defer api.Close()
	dir := t.TempDir()
	cfg := writeFile(t, dir, "inlet.yaml", `
database_url: ${DATABASE_URL}
sources:
  - {name: stripe, type: stripe, secrets: ["`+secret+`"], event_type_json: "data.object.object"}
`)
	out, errOut, code := runInletIn(t, dir, env, "backfill", "stripe", "--config", cfg, "--api-key", "sk_test_review", "--base-url", api.URL)
	if code != 0 {
		t.Fatalf("backfill: exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	var typ string
	if err := conn.QueryRow(ctx, `SELECT event_type FROM webhook_ingress.events WHERE external_event_id = 'evt_review_type_1'`).Scan(&typ); err != nil {
		t.Fatalf("backfilled event: %v\n%s", err, errOut)
	}
	var jobs int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM webhook_ingress.jobs WHERE handler = 'invoices'`).Scan(&jobs); err != nil {
		t.Fatal(err)
	}
	if typ != res.EventType || jobs != 1 {
		t.Errorf("backfill stored the event with type %q (ingress stores %q for the same bytes from this source, event_type_json: data.object.object), "+
			"and handler 'invoices' (stripe / invoice) got %d jobs, want 1", typ, res.EventType, jobs)
	}
}
