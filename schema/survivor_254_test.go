package schema_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/internal/pgtest"
	"github.com/inlet-dev/inlet/schema/queries"
)

// TestSurvivor254_FoldKeepsFirstAndMovesLastSeen guards event_types'
// first_seen and last_seen across folds (fold_event_types, latest
// definition in 068): a type's first_seen stays the earliest arrival ever
// folded, and its last_seen moves to the latest one, so `inlet events
// types`, the dashboard and the silence checks (monitor) see when a type
// last arrived, not when it first did.
//
// Mutants (helper-254), schema/migrations/068_fold_ignores_catch_up_jobs.up.sql
// ON CONFLICT clause: `last_seen = greatest(t.last_seen, excluded.last_seen)`
// changed to `last_seen = t.last_seen`; and `first_seen = least(t.first_seen,
// excluded.first_seen)` changed to `first_seen = excluded.first_seen`. The
// existing fold tests check events/unrouted counts and routed flags, and
// the silence tests set last_seen directly or fold once, so a second fold
// into an existing row never had its times checked: both survived.
func TestSurvivor254_FoldKeepsFirstAndMovesLastSeen(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pool := pgtest.NewPool(t)
	fold := func() {
		t.Helper()
		if err := asRoleCommit(t, pool, "webhook_streamer", func(tx pgx.Tx) error {
			_, err := queries.New(tx).FoldEventTypes(ctx, 100)
			return err
		}); err != nil {
			t.Fatalf("fold: %v", err)
		}
	}
	store := func(id string) time.Time {
		t.Helper()
		var at time.Time
		if err := pool.QueryRow(ctx, `INSERT INTO webhook_ingress.events
			(provider, scheme, external_event_id, event_type, headers, raw_body, signature_verified)
			VALUES ('shop', 'hmac', $1, 'order.created', '{}', '\x7b7d', true) RETURNING received_at`, id).Scan(&at); err != nil {
			t.Fatal(err)
		}
		return at
	}
	seen := func() (first, last time.Time, events int64) {
		t.Helper()
		if err := pool.QueryRow(ctx, `SELECT first_seen, last_seen, events FROM webhook_ingress.event_types
			WHERE provider = 'shop' AND event_type = 'order.created'`).Scan(&first, &last, &events); err != nil {
			t.Fatal(err)
		}
		return first, last, events
	}

	t1 := store("o1")
	fold()
	time.Sleep(20 * time.Millisecond) // received_at is now(): a later transaction, a later time
	t2 := store("o2")
	if !t2.After(t1) {
		t.Fatalf("second event received at %s, not after the first's %s", t2, t1)
	}
	fold()
	first, last, events := seen()
	if events != 2 || !first.Equal(t1) || !last.Equal(t2) {
		t.Errorf("after two folds: events %d, first_seen %s, last_seen %s; want 2, %s (the first arrival), %s (the latest)",
			events, first, last, t1, t2)
	}
}

// TestSurvivor254_OneEnabledSkipLetsTheKeyGoOn guards the ordering rule of
// docs/pipeline.md ("the policy is the handler's live one: its enabled
// subscriptions decide (skip when one of them says so)"), which every claim
// and the DLQ listing ask through order_skips_dead: a handler with two
// enabled subscriptions, one order_policy skip and one block, lets a key
// whose head is dead-lettered go on.
//
// Mutant (helper-254): schema/migrations/027_order_policy_enabled.up.sql:42,
// order_skips_dead's `bool_or(s.order_policy = 'skip') FILTER (WHERE
// s.enabled)` changed to `bool_and(...)` (skip only when every enabled row
// says so). TestOrderPolicyComesFromEnabledSubscriptions registers one
// config at a time and disables the rows of the previous one, so the
// handler never had two enabled rows of different policies: the mutant
// survived, and with it such a handler's key stays blocked behind its dead
// letter until an operator replays it.
func TestSurvivor254_OneEnabledSkipLetsTheKeyGoOn(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pool := pgtest.NewPool(t)
	q := queries.New(pool)
	key := "data.object.id"
	for _, s := range []struct{ pattern, policy string }{{"invoice.*", "skip"}, {"*", "block"}} {
		if _, err := q.UpsertSubscription(ctx, queries.UpsertSubscriptionParams{Handler: "o", ProviderPattern: "stripe",
			EventTypePattern: s.pattern, MaxAttempts: 3, OrderKey: &key, OrderPolicy: s.policy}); err != nil {
			t.Fatal(err)
		}
	}
	if n := func() (n int) {
		_ = pool.QueryRow(ctx, `SELECT count(*) FROM webhook_ingress.subscriptions WHERE handler = 'o' AND enabled`).Scan(&n)
		return n
	}(); n != 2 {
		t.Fatalf("%d enabled subscriptions of handler o, want 2", n)
	}
	event := func(id string, minute int) int64 {
		t.Helper()
		body := `{"id":"` + id + `","data":{"object":{"id":"cus_a"}}}`
		if _, err := pool.Exec(ctx, `INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, event_type, raw_body, payload, occurred_at, signature_verified)
			VALUES ('stripe', 'stripe', $1, 'invoice.paid', convert_to($2, 'UTF8'), $2::jsonb, '2026-01-01'::timestamptz + make_interval(mins => $3), true)`,
			id, body, minute); err != nil {
			t.Fatal(err)
		}
		var job int64
		if err := pool.QueryRow(ctx, `SELECT j.id FROM webhook_ingress.jobs j JOIN webhook_ingress.events e ON e.id = j.event_id
			WHERE e.external_event_id = $1 AND j.handler = 'o' AND j.order_key = 'cus_a'`, id).Scan(&job); err != nil {
			t.Fatalf("job of %s: %v", id, err)
		}
		return job
	}
	head, later := event("e1", 1), event("e2", 2)
	if _, err := pool.Exec(ctx, `UPDATE webhook_ingress.jobs SET status = 'dead_letter', attempt_count = 3, last_error_class = 'permanent' WHERE id = $1`, head); err != nil {
		t.Fatal(err)
	}
	if err := asRole(t, pool, "webhook_streamer", func(tx pgx.Tx) error {
		rows, err := queries.New(tx).ClaimJobs(ctx, queries.ClaimJobsParams{LeaseHolder: "test", LeaseFor: time.Minute, FullHandlers: []string{}, BatchSize: 100})
		if err != nil {
			return err
		}
		if leased := ids(rows, func(r queries.ClaimJobsRow) int64 { return r.ID }); !slices.Contains(leased, later) {
			t.Errorf("claim leased %v: later job %d of key cus_a held behind dead-lettered head %d; want it leased (one enabled subscription says skip)",
				leased, later, head)
		}
		return nil
	}); err != nil {
		t.Fatalf("claim as webhook_streamer: %v", err)
	}
}
