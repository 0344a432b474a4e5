package streamer_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/schema/queries"
)

var routeRoleSeq atomic.Int64

// ListJobRoutes (064), as the streamer reads it: the scopes of the roles of
// each handler whose consumers say they run as two scoped roles or more;
// not a handler with one such role, nor a role dropped (its rows left
// behind by a plain DROP ROLE) or no longer given the handler. And a
// consumer role may say only that it runs as itself.
func TestListJobRoutesNamesSharedHandlersRoles(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	newRole := func(scope string, handlers ...string) string {
		role := fmt.Sprintf("webhook_consumer_route%d_%d", os.Getpid(), routeRoleSeq.Add(1))
		if _, err := queries.New(b.admin).CreateConsumerRole(ctx, queries.CreateConsumerRoleParams{Role: role,
			Handlers: handlers, ScopeProviders: []string{scope}, ScopeTypes: []string{"*"}}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _, _ = b.admin.Exec(context.Background(), "DROP ROLE IF EXISTS "+role) })
		return role
	}
	sayUntil := func(handler, worker, role, until string) {
		t.Helper()
		if _, err := b.admin.Exec(ctx, `INSERT INTO webhook_ingress.consumers (handler, worker_id, seen_at, alive_until, db_role)
			VALUES ($1, $2, now(), now() + $4::interval, $3)`, handler, worker, role, until); err != nil {
			t.Fatal(err)
		}
	}
	say := func(handler, worker, role string) { sayUntil(handler, worker, role, "1 minute") }
	a, bb := newRole("stripe", "shared", "solo"), newRole("github", "shared")
	say("shared", "a1", a)
	say("shared", "a2", a)
	say("shared", "b1", bb)
	say("solo", "a1", a)
	c, gone := newRole("paddle", "orphaned"), newRole("shopify", "orphaned")
	say("orphaned", "c1", c)
	say("orphaned", "g1", gone)
	if _, err := b.admin.Exec(ctx, "DROP ROLE "+gone); err != nil {
		t.Fatal(err)
	}
	say("other", "a1", a) // a role not given the handler says it runs it
	// A scoped role beside webhook_worker's consumers ('') is routed, the
	// worker's route last; an old consumer (NULL) counts for nothing.
	m := newRole("stripe", "mixed")
	say("mixed", "m1", m)
	say("mixed", "w1", "")
	if _, err := b.admin.Exec(ctx, `INSERT INTO webhook_ingress.consumers (handler, worker_id, seen_at, alive_until)
		VALUES ('solo', 'old1', now(), now() + interval '1 minute')`); err != nil {
		t.Fatal(err)
	}
	// Two roles of one scope: the one with a live consumer first, whatever
	// the names.
	first, second := newRole("stripe", "overlap"), newRole("stripe", "overlap")
	sayUntil("overlap", "f1", first, "-1 minute") // stopped
	say("overlap", "s1", second)

	rows, err := queries.New(b.pool).ListJobRoutes(ctx) // as webhook_streamer
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range rows {
		got = append(got, fmt.Sprintf("%s %s %v %s:%s", r.Handler, r.RoleName, r.Alive, r.ProviderPattern, r.EventTypePattern))
	}
	want := []string{
		"mixed " + m + " true stripe:*", "mixed  true *:*",
		"overlap " + second + " true stripe:*", "overlap " + first + " false stripe:*",
		"shared " + a + " true stripe:*", "shared " + bb + " true github:*",
	}
	if !slices.Equal(got, want) {
		t.Errorf("routes %q, want %q", got, want)
	}

	err = pgx.BeginFunc(ctx, b.admin, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SET LOCAL ROLE "+a); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO webhook_ingress.consumers (handler, worker_id, seen_at, alive_until, db_role)
			VALUES ('shared', 'spoof', now(), now() + interval '1 minute', $1)`, bb)
		return err
	})
	if err == nil {
		t.Error("a consumer role said it runs as another role")
	}
	// Nor unsay another role's rows (066): b's update of a's row finds none.
	var n int64
	err = pgx.BeginFunc(ctx, b.admin, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SET LOCAL ROLE "+bb); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, `UPDATE webhook_ingress.consumers SET db_role = NULL WHERE handler = 'shared' AND worker_id = 'a1'`)
		n = tag.RowsAffected()
		return err
	})
	if err != nil || n != 0 {
		t.Errorf("role %s cleared role %s's liveness row: %d rows, %v", bb, a, n, err)
	}
}
