package schema_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/schema"
)

// Review helper-83.
//
// DEFECT: 013_event_types seeds the types already in the log from the first
// 10,000 (provider, event_type) pairs in sort order, across ALL sources
// (`FROM (SELECT * FROM pairs LIMIT 10000) p`), and only then caps each
// source at 100. A log whose sources sorting first hold 10,000 distinct
// types (before 013 nothing capped them: a replayed GitHub delivery with
// random unsigned X-GitHub-Event headers, or simply ~100 sources of ~100
// types) leaves every later source with no seeded row at all. Their
// long-known types then look brand new after the upgrade: the first event
// of each folds into a row with alerted_at NULL, so the streamer logs and
// POSTs a "new event type" alert for every one of them (the flood the
// migration's header promises the upgrade never raises), with first_seen
// set to the upgrade time instead of their real first arrival.
//
// EXPECTED: every source present in the log gets its known types seeded
// (up to the per-source cap, the rest in its '_other'), marked alerted.
//
// ROOT CAUSE: schema/migrations/013_event_types.up.sql, the seed's
// `FROM (SELECT * FROM pairs LIMIT 10000) p` — the bound is global, taken
// before the per-source ranking.
//
// SUGGESTED FIX: bound the skip scan per source, not globally: skip-scan the
// distinct providers, and for each take at most cap+1 distinct types with a
// second skip scan (LATERAL ... LIMIT 101); anything past that is '_other'.
// The work stays bounded (sources × 101 probes), and no source is left out.
// A new migration can seed the sources that 013 left without rows (marked
// alerted), for databases already upgraded.
func TestUpgradeSeedsEveryKnownSource(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, conn := migratedTo(t, 12)
	// Before 013: github holds 10,000 distinct (junk) types; stripe one real
	// type that has arrived for years.
	if _, err := conn.Exec(ctx, `INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, event_type, headers, raw_body, signature_verified)
		SELECT 'github', 'github', 'd' || i, 'junk.' || i, '{}', '\x7b7d', true FROM generate_series(1, 10000) i`); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, event_type, headers, raw_body, signature_verified)
		VALUES ('stripe', 'stripe', 'evt_old', 'charge.succeeded', '{}', '\x7b7d', true)`); err != nil {
		t.Fatal(err)
	}
	if _, err := schema.Migrate(ctx, conn); err != nil {
		t.Fatal(err)
	}
	var alerted *bool
	err := conn.QueryRow(ctx, `SELECT alerted_at IS NOT NULL FROM webhook_ingress.event_types
		WHERE provider = 'stripe' AND event_type = 'charge.succeeded'`).Scan(&alerted)
	if errors.Is(err, pgx.ErrNoRows) {
		t.Errorf("stripe/charge.succeeded, in the log before the upgrade, was not seeded into event_types: " +
			"the seed's global 10,000-pair bound was used up by github")
	} else if err != nil {
		t.Fatal(err)
	}

	// What the operator then sees: the next charge.succeeded is a "new type".
	if _, err := conn.Exec(ctx, `INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, event_type, headers, raw_body, signature_verified)
		VALUES ('stripe', 'stripe', 'evt_new', 'charge.succeeded', '{}', '\x7b7d', true)`); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `SELECT webhook_ingress.fold_event_types(100)`); err != nil {
		t.Fatal(err)
	}
	var isNew bool
	if err := conn.QueryRow(ctx, `SELECT alerted_at IS NULL FROM webhook_ingress.event_types
		WHERE provider = 'stripe' AND event_type = 'charge.succeeded'`).Scan(&isNew); err != nil {
		t.Fatal(err)
	}
	if isNew {
		t.Errorf("after the upgrade, stripe/charge.succeeded (stored before it) is reported as a new event type")
	}
}
