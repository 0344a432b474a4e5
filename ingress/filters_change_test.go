package ingress_test

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inlet-dev/inlet/ingress"
	"github.com/inlet-dev/inlet/internal/database"
	"github.com/inlet-dev/inlet/internal/pgtest"
	"github.com/inlet-dev/inlet/schema"
)

// A change to filtered routing applies to the very next event, in both
// stores, although ingress reads the filtered subscriptions only once a
// second: FanOutFiltered refuses a transaction whose copy is out of date
// (040), and the store matches the events again on a fresh copy. (Found by
// a review: a filter added to a subscription that had none made the trigger
// skip it at once, while ingress's copy did not know it yet, so an event
// that both the old and the new rule let through got no job of its handler
// for up to a second.)
func TestFilterChangesApplyToTheNextEvent(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"single", "group"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			store, admin := filterStore(t, kind)
			exec := func(sql string) {
				t.Helper()
				if _, err := admin.Exec(ctx, sql); err != nil {
					t.Fatal(err)
				}
			}
			insert := func(id string, amount int) {
				t.Helper()
				if _, err := store.Insert(ctx, charge(id, amount)); err != nil {
					t.Fatal(err)
				}
			}
			exec(`INSERT INTO webhook_ingress.subscriptions (handler, provider_pattern, event_type_pattern) VALUES ('billing', 'stripe', 'charge.*')`)
			insert("evt_unfiltered", 5) // ingress has read its copy: no filter

			// A filter added in place: the next event passing the old rule
			// and the new filter gets its job; one the filter rejects none.
			exec(`UPDATE webhook_ingress.subscriptions SET filter = 'payload.data.object.amount > 10000' WHERE handler = 'billing'`)
			insert("evt_added_pass", 25000)
			insert("evt_added_miss", 5)

			// The expression changed: the new one decides at once.
			exec(`UPDATE webhook_ingress.subscriptions SET filter = 'payload.data.object.amount > 50000' WHERE handler = 'billing'`)
			insert("evt_changed_miss", 25000)
			insert("evt_changed_pass", 60000)

			// A new filtered subscription applies at once too.
			exec(`INSERT INTO webhook_ingress.subscriptions (handler, provider_pattern, event_type_pattern, filter) VALUES ('big', 'stripe', '*', 'payload.data.object.amount > 70000')`)
			insert("evt_new_pass", 80000)

			// The filter removed: the trigger routes everything again.
			exec(`UPDATE webhook_ingress.subscriptions SET filter = NULL WHERE handler = 'billing'`)
			insert("evt_removed", 5)

			got := jobsOf(t, admin, "billing")
			want := []string{"evt_added_pass", "evt_changed_pass", "evt_new_pass", "evt_removed", "evt_unfiltered"}
			if !slices.Equal(got, want) {
				t.Errorf("billing's jobs are for %v, want %v", got, want)
			}
			if got := jobsOf(t, admin, "big"); !slices.Equal(got, []string{"evt_new_pass"}) {
				t.Errorf("big's jobs are for %v, want [evt_new_pass]", got)
			}
		})
	}
}

// Re-registering a subscription unchanged (what every consumer does when it
// starts) does not move filtered routing's version: ingress's transactions
// are not refused and matched again for nothing.
func TestUnchangedSubscriptionKeepsTheFilterVersion(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	admin, err := pgxpool.New(ctx, pgtest.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admin.Close)
	version := func() (v int64) {
		t.Helper()
		if err := admin.QueryRow(ctx, `SELECT version FROM webhook_ingress.filter_version`).Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	v0 := version()
	if _, err := admin.Exec(ctx, `INSERT INTO webhook_ingress.subscriptions (handler, filter) VALUES ('h', 'event.type == "x"')`); err != nil {
		t.Fatal(err)
	}
	v1 := version()
	if v1 == v0 {
		t.Fatal("a new filtered subscription did not move the version")
	}
	for _, sql := range []string{
		`UPDATE webhook_ingress.subscriptions SET filter = 'event.type == "x"', enabled = true WHERE handler = 'h'`,
		`UPDATE webhook_ingress.subscriptions SET max_attempts = 7 WHERE handler = 'h'`,
		`INSERT INTO webhook_ingress.subscriptions (handler) VALUES ('plain')`,
		`UPDATE webhook_ingress.subscriptions SET enabled = false WHERE handler = 'plain'`,
	} {
		if _, err := admin.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
		if v := version(); v != v1 {
			t.Fatalf("%s moved the version %d → %d", sql, v1, v)
		}
	}
	if _, err := admin.Exec(ctx, `UPDATE webhook_ingress.subscriptions SET enabled = false WHERE handler = 'h'`); err != nil {
		t.Fatal(err)
	}
	if version() == v1 {
		t.Fatal("disabling a filtered subscription did not move the version")
	}
}

// filterStore is a store of kind single or group, as the ingress role, and
// an owner's pool.
func filterStore(t *testing.T, kind string) (ingress.Store, *pgxpool.Pool) {
	t.Helper()
	if kind == "group" {
		g, admin, _ := groupStore(t, ingress.GroupConfig{})
		return g, admin
	}
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	admin, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admin.Close)
	pool, err := database.Open(ctx, url, database.Options{Role: schema.IngressRole, MaxConns: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return ingress.NewPGStore(pool, nil), admin
}

// jobsOf returns the external ids of the events handler has jobs for.
func jobsOf(t *testing.T, admin *pgxpool.Pool, handler string) []string {
	t.Helper()
	rows, err := admin.Query(context.Background(), `SELECT e.external_event_id FROM webhook_ingress.jobs j
		JOIN webhook_ingress.events e ON e.id = j.event_id AND e.received_at = j.event_received_at
		WHERE j.handler = $1 ORDER BY e.external_event_id`, handler)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		out = append(out, id)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(fmt.Errorf("jobs of %s: %w", handler, err))
	}
	return out
}
