package schema_test

import (
	"context"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/internal/pgtest"
	"github.com/inlet-dev/inlet/schema/queries"
)

// TestSurvivor274_FoldMovesEventTypeTimesForward guards that each fold of
// event_type_arrivals into an existing event_types row moves that row's
// times as `inlet events types`, the admin API and the dashboard show them:
// first_seen stays the earliest arrival, last_seen becomes the latest, and
// the routed/unrouted times (last_routed_at, first_unrouted_at,
// last_unrouted_at) follow the events of each kind, across several folds.
//
// Mutant (survivor 274): schema/migrations/068_fold_ignores_catch_up_jobs.up.sql:73,
// fold_event_types' ON CONFLICT DO UPDATE, `last_seen = greatest(t.last_seen,
// excluded.last_seen)` changed to `last_seen = t.last_seen` (a type's
// last_seen frozen at its first fold). No existing test caught it:
// TestEventTypesFold and the admin/monitor tests check the events and
// unrouted_events counts, routed and alerted_at, never the times of a row
// a later fold updates.
func TestSurvivor274_FoldMovesEventTypeTimesForward(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pool := pgtest.NewPool(t)
	if _, err := pool.Exec(ctx, `INSERT INTO webhook_ingress.subscriptions (handler, provider_pattern, event_type_pattern)
		VALUES ('charges', 'stripe', 'charge.routed')`); err != nil {
		t.Fatal(err)
	}
	// insert stores one event in its own transaction (its own now()) and
	// returns its received_at.
	insert := func(id, typ string) time.Time {
		t.Helper()
		time.Sleep(5 * time.Millisecond) // a received_at strictly after the last one
		var at time.Time
		if err := pool.QueryRow(ctx, `INSERT INTO webhook_ingress.events
			(provider, scheme, external_event_id, event_type, headers, raw_body, signature_verified)
			VALUES ('stripe', 'hmac', $1, $2, '{}', '\x7b7d', true) RETURNING received_at`, id, typ).Scan(&at); err != nil {
			t.Fatal(err)
		}
		return at
	}
	fold := func() {
		t.Helper()
		if _, err := queries.New(pool).FoldEventTypes(ctx, 100); err != nil {
			t.Fatal(err)
		}
	}
	type times struct {
		first, last                             time.Time
		lastRouted, firstUnrouted, lastUnrouted *time.Time
		events, unrouted                        int64
	}
	read := func(typ string) times {
		t.Helper()
		var r times
		if err := pool.QueryRow(ctx, `SELECT first_seen, last_seen, last_routed_at, first_unrouted_at, last_unrouted_at, events, unrouted_events
			FROM webhook_ingress.event_types WHERE provider = 'stripe' AND event_type = $1`, typ).
			Scan(&r.first, &r.last, &r.lastRouted, &r.firstUnrouted, &r.lastUnrouted, &r.events, &r.unrouted); err != nil {
			t.Fatalf("event_types stripe/%s: %v", typ, err)
		}
		return r
	}
	eq := func(what string, got *time.Time, want time.Time) {
		t.Helper()
		if got == nil || !got.Equal(want) {
			t.Errorf("%s = %v, want %v", what, got, want)
		}
	}

	// A routed type, folded after each of its three events.
	r1 := insert("r1", "charge.routed")
	fold()
	insert("r2", "charge.routed")
	fold()
	r3 := insert("r3", "charge.routed")
	fold()
	got := read("charge.routed")
	if got.events != 3 || got.unrouted != 0 {
		t.Errorf("charge.routed: %d events, %d unrouted; want 3, 0", got.events, got.unrouted)
	}
	eq("charge.routed first_seen", &got.first, r1)
	eq("charge.routed last_seen", &got.last, r3)
	eq("charge.routed last_routed_at", got.lastRouted, r3)
	if got.firstUnrouted != nil || got.lastUnrouted != nil {
		t.Errorf("charge.routed unrouted times %v, %v; want none", got.firstUnrouted, got.lastUnrouted)
	}

	// An unrouted type, the same way.
	u1 := insert("u1", "charge.unrouted")
	fold()
	insert("u2", "charge.unrouted")
	fold()
	u3 := insert("u3", "charge.unrouted")
	fold()
	got = read("charge.unrouted")
	if got.events != 3 || got.unrouted != 3 {
		t.Errorf("charge.unrouted: %d events, %d unrouted; want 3, 3", got.events, got.unrouted)
	}
	eq("charge.unrouted first_seen", &got.first, u1)
	eq("charge.unrouted last_seen", &got.last, u3)
	eq("charge.unrouted first_unrouted_at", got.firstUnrouted, u1)
	eq("charge.unrouted last_unrouted_at", got.lastUnrouted, u3)
	if got.lastRouted != nil {
		t.Errorf("charge.unrouted last_routed_at %v; want none", got.lastRouted)
	}
}
