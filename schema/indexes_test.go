package schema_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/schema"
)

// Several `inlet migrate` at once (an init container per replica, during the
// upgrade that left a partition index pending) build it once between them,
// and each finishes without error.
func TestBuildIndexesConcurrently(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, conn := migratedTo(t, 11)
	// Over the 10,000 rows 012 indexes inline: its payload index is left pending.
	if _, err := conn.Exec(ctx, `INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, event_type, raw_body, signature_verified)
		SELECT 'stripe', 'stripe', 'evt_' || n, 'charge.succeeded', convert_to(format('{"id":"evt_%s"}', n), 'UTF8'), true
		FROM generate_series(1, 12000) n`); err != nil {
		t.Fatal(err)
	}
	if _, err := schema.MigrateTo(ctx, conn, 12); err != nil {
		t.Fatal(err)
	}
	if p, err := schema.PendingIndexes(ctx, conn); err != nil || len(p) != 1 {
		t.Fatalf("pending indexes %+v (%v), want one", p, err)
	}
	const migrators = 3
	type result struct {
		built []schema.IndexBuild
		err   error
	}
	results := make(chan result, migrators)
	var waited atomic.Int32
	gate := make(chan struct{})
	for range migrators {
		c, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(ctx)
		go func() {
			<-gate
			built, err := schema.BuildIndexes(ctx, c, nil, func() { waited.Add(1) })
			results <- result{built, err}
		}()
	}
	close(gate)
	built := 0
	for range migrators {
		r := <-results
		if r.err != nil {
			t.Error(r.err)
		}
		built += len(r.built)
	}
	if built != 1 {
		t.Errorf("%d builds reported in all, want the one pending index built once", built)
	}
	// All listed it pending before the first had built it: the others waited,
	// and said so.
	if n := waited.Load(); n < 1 {
		t.Errorf("%d migrators said they waited, want at least one", n)
	}
	var valid bool
	if err := conn.QueryRow(ctx, `SELECT indisvalid FROM pg_index WHERE indexrelid = 'webhook_ingress.idx_events_payload'::regclass`).Scan(&valid); err != nil || !valid {
		t.Fatalf("payload index valid %v (%v)", valid, err)
	}
	if p, err := schema.PendingIndexes(ctx, conn); err != nil || len(p) != 0 {
		t.Fatalf("still pending: %+v %v", p, err)
	}
}
