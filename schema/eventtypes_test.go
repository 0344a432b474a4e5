package schema_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/inlet-dev/inlet/internal/pgtest"
	"github.com/inlet-dev/inlet/schema"
	"github.com/inlet-dev/inlet/schema/queries"
)

const insertTypedEvent = `INSERT INTO webhook_ingress.events
    (provider, scheme, external_event_id, event_type, headers, raw_body, signature_verified)
    VALUES ($1, 'hmac', $2, $3, '{}', '\x7b7d', true)`

type typeRow struct {
	events, unrouted int64
	routed           *bool
	alerted          bool
}

func eventTypes(t *testing.T, q interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}) map[string]typeRow {
	t.Helper()
	rows, err := q.Query(context.Background(), `SELECT provider || '/' || event_type, events, unrouted_events, routed, alerted_at IS NOT NULL
		FROM webhook_ingress.event_types`)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]typeRow{}
	for rows.Next() {
		var k string
		var r typeRow
		if err := rows.Scan(&k, &r.events, &r.unrouted, &r.routed, &r.alerted); err != nil {
			t.Fatal(err)
		}
		out[k] = r
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// Every (source, type) stored is folded into event_types: events that
// created no job count as unrouted, and a source's types past the cap go to
// '_other', so random unsigned type headers add no rows.
func TestEventTypesFold(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	mustExec := func(sql string, args ...any) {
		t.Helper()
		if _, err := pool.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	mustExec(`INSERT INTO webhook_ingress.subscriptions (handler, provider_pattern, event_type_pattern) VALUES ('charges', 'stripe', 'charge.*')`)
	// A multi-row statement, as group commit writes: routed and unrouted mixed.
	mustExec(`INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, event_type, headers, raw_body, signature_verified)
		SELECT 'stripe', 'stripe', 'evt_' || i, CASE WHEN i % 3 = 0 THEN 'invoice.paid' ELSE 'charge.succeeded' END, '{}', '\x7b7d', true
		FROM generate_series(1, 9) i`)
	for i := range 5 {
		mustExec(insertTypedEvent, "github", fmt.Sprintf("d%d", i), fmt.Sprintf("random.%d", i))
	}
	var n int64
	err := asRole(t, pool, "webhook_streamer", func(tx pgx.Tx) error {
		var err error
		n, err = queries.New(tx).FoldEventTypes(ctx, 3)
		return err
	})
	if err != nil {
		t.Fatalf("fold as webhook_streamer: %v", err)
	}
	if n, err = queries.New(pool).FoldEventTypes(ctx, 3); err != nil {
		t.Fatal(err)
	}
	// A second batch of known types adds up.
	mustExec(insertTypedEvent, "stripe", "evt_late", "invoice.paid")
	if n, err = queries.New(pool).FoldEventTypes(ctx, 3); err != nil || n != 1 {
		t.Fatalf("second fold: %d rows, %v; want 1", n, err)
	}
	got := eventTypes(t, pool)
	f, tr := false, true
	want := map[string]typeRow{
		"stripe/charge.succeeded": {events: 6, routed: &tr},
		"stripe/invoice.paid":     {events: 4, unrouted: 4, routed: &f},
		"github/random.0":         {events: 1, unrouted: 1, routed: &f},
		"github/random.1":         {events: 1, unrouted: 1, routed: &f},
		"github/random.2":         {events: 1, unrouted: 1, routed: &f},
		"github/_other":           {events: 2, unrouted: 2, routed: &f},
	}
	if len(got) != len(want) {
		t.Fatalf("event_types: %v, want %v", got, want)
	}
	for k, w := range want {
		g, ok := got[k]
		if !ok || g.events != w.events || g.unrouted != w.unrouted || g.routed == nil || *g.routed != *w.routed || g.alerted {
			t.Errorf("%s: %+v (found %v), want %+v", k, g, ok, w)
		}
	}
	var left int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM webhook_ingress.event_type_arrivals`).Scan(&left); err != nil || left != 0 {
		t.Fatalf("arrivals left after the fold: %d, %v", left, err)
	}
	// More random types change nothing but _other's count.
	for i := 5; i < 50; i++ {
		mustExec(insertTypedEvent, "github", fmt.Sprintf("d%d", i), fmt.Sprintf("random.%d", i))
	}
	if n, err = queries.New(pool).FoldEventTypes(ctx, 3); err != nil {
		t.Fatal(err)
	}
	if got := eventTypes(t, pool); len(got) != 6 || got["github/_other"].events != 47 {
		t.Fatalf("after 45 more random types: %d rows, _other %+v; want 6 rows, 47 events", len(got), got["github/_other"])
	}
}

// The upgrade to 013 on a log with rows, while webhooks keep arriving: the
// types already stored are found (counted from 0, not alerted as new), every
// type arriving during and after the upgrade is counted once, and none is
// missed.
func TestUpgradeToEventTypesWhileIngesting(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.NewEmptyDatabase(t)
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	ms, err := schema.Migrations()
	if err != nil {
		t.Fatal(err)
	}
	before := -1
	for i, m := range ms {
		if m.Version == 13 {
			before = i
		}
	}
	if before < 0 {
		t.Fatal("no migration 13")
	}
	if _, err := schema.MigrateTo(ctx, conn, before); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `INSERT INTO webhook_ingress.subscriptions (handler, provider_pattern, event_type_pattern) VALUES ('h', 'stripe', '*')`); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, event_type, headers, raw_body, signature_verified)
		SELECT p, 'hmac', p || '_old_' || i, 'old.' || (i % 7), '{}', '\x7b7d', true
		FROM generate_series(1, 5000) i, unnest(ARRAY['stripe', 'github']) p`); err != nil {
		t.Fatal(err)
	}

	// Webhooks keep arriving, each of a type of its own, through the upgrade,
	// from sources of 50 types each: how many arrive before 013's seed
	// depends on the machine's load, and one source past the seed's cap of
	// 100 named types would count the rest in '_other', not by name.
	wconn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer wconn.Close(ctx)
	var stop atomic.Bool
	var wg sync.WaitGroup
	var sent, retried atomic.Int64
	done := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(done)
		for i := 0; !stop.Load(); {
			_, err := wconn.Exec(ctx, insertTypedEvent, fmt.Sprintf("live%d", i/50), fmt.Sprintf("live_%d", i), fmt.Sprintf("live.%d", i))
			var pgErr *pgconn.PgError
			switch {
			case err == nil:
				sent.Add(1)
				i++
			case errors.As(err, &pgErr) && (pgErr.Code == "40P01" || pgErr.Code == "0A000"):
				// A deadlock with the migration's DDL, or a statement
				// prepared before it: ingress answers 503 and the provider
				// sends it again, as this does.
				retried.Add(1)
			default:
				t.Errorf("insert during the upgrade: %v", err)
				return
			}
		}
	}()
	// On a failure below, the sender stops before wconn closes (deferred
	// earlier, so run later): it must not be used while it closes.
	defer func() {
		stop.Store(true)
		wg.Wait()
	}()
	// waitSent waits for n events sent, failing if the sender stopped.
	waitSent := func(n int64) {
		for sent.Load() < n {
			select {
			case <-done:
				t.Fatalf("the sender stopped after %d events", sent.Load())
			default:
				runtime.Gosched()
			}
		}
	}
	waitSent(20)
	if _, err := schema.Migrate(ctx, conn); err != nil {
		t.Fatal(err)
	}
	waitSent(sent.Load() + 20)
	stop.Store(true)
	wg.Wait()
	t.Logf("%d events sent during the upgrade, %d sent again after a deadlock or a stale plan", sent.Load(), retried.Load())
	if _, err := conn.Exec(ctx, `SELECT webhook_ingress.fold_event_types(1000)`); err != nil {
		t.Fatal(err)
	}

	got := eventTypes(t, conn)
	rows, err := conn.Query(ctx, `SELECT provider || '/' || event_type, count(*) FROM webhook_ingress.events GROUP BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	stored, err := pgx.CollectRows(rows, pgx.RowToStructByPos[struct {
		Key string
		N   int64
	}])
	if err != nil {
		t.Fatal(err)
	}
	var seeded, counted int
	for _, s := range stored {
		g, ok := got[s.Key]
		switch {
		case !ok:
			t.Errorf("%s (%d events) is not in event_types", s.Key, s.N)
		case g.alerted && g.events == 0:
			seeded++ // in the log before the upgrade
		case !g.alerted && g.events == s.N && g.unrouted == s.N:
			counted++ // arrived after: new, unrouted (only stripe has a subscription)
		default:
			t.Errorf("%s: %+v, %d events stored", s.Key, g, s.N)
		}
	}
	if len(got) != len(stored) {
		t.Errorf("event_types has %d rows, the log %d types", len(got), len(stored))
	}
	if seeded < 14 || counted < 20 {
		t.Errorf("%d types seeded (want at least the 14 old ones), %d counted after the upgrade (want at least 20)", seeded, counted)
	}
	t.Logf("%d types seeded, %d counted; %d webhooks sent during the upgrade", seeded, counted, sent.Load())
}
