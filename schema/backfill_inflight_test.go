package schema_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/backfill"
	"github.com/inlet-dev/inlet/internal/database"
	"github.com/inlet-dev/inlet/schema"
)

// TestStoredBackfillWaitsForAnInFlightOldIngressRow (review helper-84).
//
// Defect: `inlet backfill stored` (backfill.FillStored, docs/database.md
// "Upgrading to 012") fixes its range at start as max(id) of the events it
// can see, then walks it once. An event whose id was taken before that max
// but whose transaction had not committed yet (the previous version's
// ingress is still running during the upgrade, as TestUpgradeToOccurredAtAndPayload
// has it; its group-commit batch is open while another replica's later
// batch commits) is invisible to the walk, is passed over, and is never
// visited again: the run ends "done" (derived_backfill.last_event_id =
// until_id >= that id) with the row's occurred_at and payload still NULL,
// silently. Its --where/payload queries and ordered handlers' order_at then
// miss it; nothing says so.
//
// Expected: when FillStored returns without error, every event with
// id <= until_id is filled (the doc: old rows stay NULL "until the owner
// runs inlet backfill stored").
func TestStoredBackfillWaitsForAnInFlightOldIngressRow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, conn := migratedTo(t, 11)
	// Events stored before 012.
	if _, err := conn.Exec(ctx, `INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, event_type, raw_body, signature_verified)
		SELECT 'stripe', 'stripe', 'evt_old_' || n, 'charge.succeeded',
		       convert_to(format('{"id":"evt_old_%s","created":%s}', n, 1700000000 + n), 'UTF8'), true
		FROM generate_series(1, 10) n`); err != nil {
		t.Fatal(err)
	}
	if _, err := schema.Migrate(ctx, conn); err != nil {
		t.Fatal(err)
	}

	// The previous version's ingress (it knows neither occurred_at nor
	// payload), two replicas: one's group-commit batch is still open while
	// the other's, later, commits.
	writer, err := database.Open(ctx, url, database.Options{Role: schema.IngressRole})
	if err != nil {
		t.Fatal(err)
	}
	defer writer.Close()
	const oldInsert = `INSERT INTO webhook_ingress.events
		(provider, scheme, external_event_id, event_type, headers, raw_body, signature_verified, secret_index, request_uri)
		VALUES ('stripe', 'stripe', $1, 'charge.succeeded', '{}', $2, true, 0, '/webhooks/stripe')`
	body := func(id string) []byte { return []byte(fmt.Sprintf(`{"id":%q,"created":1700000500}`, id)) }
	open, err := writer.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer open.Rollback(ctx)
	if _, err := open.Exec(ctx, oldInsert, "evt_inflight", body("evt_inflight")); err != nil {
		t.Fatal(err)
	}
	if _, err := writer.Exec(ctx, oldInsert, "evt_later", body("evt_later")); err != nil {
		t.Fatal(err)
	}

	// The owner runs the documented backfill meanwhile.
	type result struct {
		st  backfill.StoredStats
		err error
	}
	done := make(chan result, 1)
	go func() {
		st, err := backfill.FillStored(ctx, conn, backfill.StoredConfig{})
		done <- result{st, err}
	}()
	var res result
	select {
	case res = <-done: // the current code: it does not wait for the open batch
		if err := open.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second): // a fixed backfill waits for it
		if err := open.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		select {
		case res = <-done:
		case <-time.After(30 * time.Second):
			t.Fatal("backfill did not finish after the open batch committed")
		}
	}
	if res.err != nil {
		t.Fatalf("backfill: %v", res.err)
	}

	var id int64
	var filled bool
	if err := conn.QueryRow(ctx, `SELECT id, payload IS NOT NULL AND occurred_at IS NOT NULL FROM webhook_ingress.events
		WHERE external_event_id = 'evt_inflight'`).Scan(&id, &filled); err != nil {
		t.Fatal(err)
	}
	var last, until int64
	if err := conn.QueryRow(ctx, `SELECT last_event_id, until_id FROM webhook_ingress.derived_backfill`).Scan(&last, &until); err != nil {
		t.Fatal(err)
	}
	if id <= until && !filled {
		t.Fatalf("backfill finished (filled through %d of events up to %d, read %d) but event %d, inside that range, "+
			"still has occurred_at and payload NULL: its old-ingress batch was in flight when the run began", last, until, res.st.Read, id)
	}
}
