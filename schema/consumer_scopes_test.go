package schema_test

// A consumer role's scopes (038_consumer_role_scopes): the owner pins which
// sources and types a role may subscribe its handlers to and read, so a
// team cannot widen its own subscription to read another team's events.

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inlet-dev/inlet/internal/pgtest"
	"github.com/inlet-dev/inlet/schema"
	"github.com/inlet-dev/inlet/schema/queries"
)

// newScopedConsumerRole is newConsumerRole with the given scopes
// ({source pattern, type pattern}) instead of every event.
func newScopedConsumerRole(t *testing.T, pool *pgxpool.Pool, scopes [][2]string, handlers ...string) string {
	t.Helper()
	ctx := context.Background()
	role := fmt.Sprintf("webhook_consumer_s%d_%d", os.Getpid(), roleSeq.Add(1))
	var ps, ts []string
	for _, s := range scopes {
		ps, ts = append(ps, s[0]), append(ts, s[1])
	}
	if _, err := queries.New(pool).CreateConsumerRole(ctx, queries.CreateConsumerRoleParams{Role: role, Handlers: handlers,
		ScopeProviders: ps, ScopeTypes: ts}); err != nil {
		t.Fatalf("create consumer role %s: %v", role, err)
	}
	t.Cleanup(func() {
		if _, err := queries.New(pool).DropConsumerRole(ctx, role); err != nil {
			t.Errorf("drop consumer role %s: %v", role, err)
		}
	})
	return role
}

// subscribeAs registers handler for (provider, type) as role, committed.
func subscribeAs(t *testing.T, pool *pgxpool.Pool, role, handler, provider, eventType string) error {
	t.Helper()
	return asRoleCommit(t, pool, role, func(tx pgx.Tx) error {
		_, err := tx.Exec(context.Background(), schema.Query("UpsertSubscription"), handler, provider, eventType, 5, nil, nil, "block")
		return err
	})
}

// A per-consumer role "registers ... only [its handlers'] subscriptions" and
// "reads the body and headers only of events that have a job for one of
// them" (docs/operations.md). Before 038 it chose which events got its
// jobs: registering its own handler for every source and type ('*') was
// allowed, and from then on the owner's fan-out gave it a job, and so the
// body and headers, of every event, another team's included. Now the
// registration is refused and the body stays out of reach.
func TestConsumerCannotWidenItsSubscriptionToReadOtherTeamsEvents(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	for _, s := range [][2]string{{"team-a", "stripe"}, {"team-b", "github"}} {
		if _, err := pool.Exec(ctx, `INSERT INTO webhook_ingress.subscriptions (handler, provider_pattern) VALUES ($1, $2)`, s[0], s[1]); err != nil {
			t.Fatal(err)
		}
	}
	teamA := newScopedConsumerRole(t, pool, [][2]string{{"stripe", "*"}}, "team-a")
	newScopedConsumerRole(t, pool, [][2]string{{"github", "*"}}, "team-b")

	leakInsertEvent(t, pool, "github", "evt_before")
	if got, err := leakStrings(t, pool, teamA, `SELECT convert_from(raw_body, 'UTF8') FROM webhook_ingress.events WHERE provider = 'github'`); err != nil || len(got) != 0 {
		t.Fatalf("before: team-a reads github bodies %q, %v; want none", got, err)
	}

	// team-a registers its own handler for everything: refused.
	err := subscribeAs(t, pool, teamA, "team-a", "*", "*")
	if !isPermissionDenied(err) || !strings.Contains(err.Error(), "consumer_in_scope") {
		t.Fatalf("team-a registers team-a for '*': %v; want refused by policy consumer_in_scope (42501)", err)
	}
	// Inside its scope it still may.
	if err := subscribeAs(t, pool, teamA, "team-a", "stripe", "invoice.*"); err != nil {
		t.Fatalf("team-a registers team-a for stripe invoice.*: %v", err)
	}

	leakInsertEvent(t, pool, "github", "evt_after")
	got, err := leakStrings(t, pool, teamA, `SELECT convert_from(raw_body, 'UTF8') || ' ' || headers::text FROM webhook_ingress.events WHERE provider = 'github'`)
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range got {
		if strings.Contains(g, leakSecretBody) || strings.Contains(g, leakSecretHeader) {
			t.Errorf("consumer role %s (handler team-a, scope stripe) reads the body and headers of team-b's github event: %q", teamA, g)
		}
	}
	var jobs int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM webhook_ingress.jobs WHERE handler = 'team-a' AND provider = 'github'`).Scan(&jobs); err != nil || jobs != 0 {
		t.Errorf("team-a has %d jobs of github events (%v); want none", jobs, err)
	}
}

// Which subscription patterns a scope covers: a pattern lies inside a scope
// pattern when every value it matches, the scope's matches too.
func TestConsumerScopeCoversOnlyNarrowerPatterns(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	cases := []struct {
		scope, sub [2]string
		allowed    bool
	}{
		{[2]string{"stripe", "*"}, [2]string{"stripe", "*"}, true},
		{[2]string{"stripe", "*"}, [2]string{"stripe", "invoice.paid"}, true},
		{[2]string{"stripe", "*"}, [2]string{"stripe", ""}, true},
		{[2]string{"stripe", "*"}, [2]string{"*", "*"}, false},
		{[2]string{"stripe", "*"}, [2]string{"stri*", "*"}, false},
		{[2]string{"stripe", "*"}, [2]string{"stripe*", "*"}, false},
		{[2]string{"stripe", "*"}, [2]string{"github", "*"}, false},
		{[2]string{"stripe*", "*"}, [2]string{"stripe-eu", "*"}, true},
		{[2]string{"stripe*", "*"}, [2]string{"stripe-*", "*"}, true},
		{[2]string{"stripe*", "*"}, [2]string{"stri*", "*"}, false},
		{[2]string{"*", "invoice.*"}, [2]string{"github", "invoice.paid"}, true},
		{[2]string{"*", "invoice.*"}, [2]string{"github", "invoice.*"}, true},
		{[2]string{"*", "invoice.*"}, [2]string{"github", "*"}, false},
		{[2]string{"*", "invoice.*"}, [2]string{"github", "invoice*"}, false},
		{[2]string{"*", "*a*"}, [2]string{"x", "*a"}, true},
		{[2]string{"*", "*a*"}, [2]string{"x", "*"}, false},
		// LIKE's own wildcards are literal characters in a glob.
		{[2]string{"a_c", "*"}, [2]string{"abc", "*"}, false},
		{[2]string{"a%c", "*"}, [2]string{"abc", "*"}, false},
		{[2]string{"a_c", "*"}, [2]string{"a_c", "*"}, true},
		{[2]string{"a\\c", "*"}, [2]string{"a\\c", "*"}, true},
		{[2]string{"shop", ""}, [2]string{"shop", ""}, true},
		{[2]string{"shop", ""}, [2]string{"shop", "*"}, false},
	}
	for i, c := range cases {
		handler := fmt.Sprintf("cover-%d", i)
		role := newScopedConsumerRole(t, pool, [][2]string{c.scope}, handler)
		err := subscribeAs(t, pool, role, handler, c.sub[0], c.sub[1])
		switch {
		case c.allowed && err != nil:
			t.Errorf("scope %q: subscribing %q refused: %v", c.scope, c.sub, err)
		case !c.allowed && !isPermissionDenied(err):
			t.Errorf("scope %q: subscribing %q: %v; want refused (42501)", c.scope, c.sub, err)
		}
	}
}

// A subscription wider than the role's scope that the role did not write
// (one enabled before 038, by the owner, or left when the scope narrowed)
// opens nothing outside the scope; the role may switch it off but not on.
func TestConsumerScopeHoldsAWiderSubscription(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `INSERT INTO webhook_ingress.subscriptions (handler) VALUES ('team-a')`); err != nil {
		t.Fatal(err)
	}
	teamA := newScopedConsumerRole(t, pool, [][2]string{{"stripe", "*"}}, "team-a")
	leakInsertEvent(t, pool, "github", "evt_github")
	leakInsertEvent(t, pool, "stripe", "evt_stripe")

	got, err := leakStrings(t, pool, teamA, `SELECT provider || ' ' || convert_from(raw_body, 'UTF8') FROM webhook_ingress.events ORDER BY provider`)
	if err != nil || len(got) != 1 || !strings.HasPrefix(got[0], "stripe ") {
		t.Errorf("team-a (scope stripe, subscribed to '*' by the owner) reads %q, %v; want the stripe event only", got, err)
	}
	// Nor its job of the github event (whose order key or error text may
	// copy the body), which exists.
	got, err = leakStrings(t, pool, teamA, `SELECT j.provider || ' ' || coalesce(e.provider, 'missing')
		FROM webhook_ingress.jobs j LEFT JOIN webhook_ingress.events e ON e.id = j.event_id AND e.received_at = j.event_received_at
		ORDER BY 1`)
	if err != nil || !slices.Equal(got, []string{"stripe stripe"}) {
		t.Errorf("team-a's jobs and their events: %q, %v; want [stripe stripe]", got, err)
	}
	var all int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM webhook_ingress.jobs WHERE handler = 'team-a'`).Scan(&all); err != nil || all != 2 {
		t.Fatalf("team-a has %d jobs (%v), want 2", all, err)
	}

	off := func(enabled bool) error {
		return asRoleCommit(t, pool, teamA, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `UPDATE webhook_ingress.subscriptions SET enabled = $1, updated_at = now() WHERE handler = 'team-a'`, enabled)
			return err
		})
	}
	if err := off(false); err != nil {
		t.Fatalf("team-a disables its wide subscription: %v", err)
	}
	if err := off(true); !isPermissionDenied(err) {
		t.Errorf("team-a re-enables its wide subscription: %v; want refused (42501)", err)
	}
	if err := subscribeAs(t, pool, teamA, "team-a", "*", "*"); !isPermissionDenied(err) {
		t.Errorf("team-a re-registers its wide subscription: %v; want refused (42501)", err)
	}
	// Nor can it give itself a scope.
	err = asRoleCommit(t, pool, teamA, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO webhook_ingress.consumer_role_scopes (role_name, provider_pattern, event_type_pattern)
			VALUES (current_user, '*', '*')`)
		return err
	})
	if !isPermissionDenied(err) {
		t.Errorf("team-a gives itself the scope '*': %v; want refused (42501)", err)
	}
}

// inlet roles create-consumer's function: a new role needs a scope; run
// again without one, it keeps the role's; with one, it replaces them.
func TestCreateConsumerRoleScopes(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	q := queries.New(pool)
	role := fmt.Sprintf("webhook_consumer_r%d_%d", os.Getpid(), roleSeq.Add(1))

	_, err := q.CreateConsumerRole(ctx, queries.CreateConsumerRoleParams{Role: role, Handlers: []string{"h"}})
	if err == nil || !strings.Contains(err.Error(), "has no scope") {
		t.Fatalf("a new role without a scope: %v; want refused, saying it has no scope", err)
	}
	var exists bool
	if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_roles WHERE rolname = $1)`, role).Scan(&exists); err != nil || exists {
		t.Fatalf("the refused role exists: %v, %v", exists, err)
	}
	for _, bad := range []queries.CreateConsumerRoleParams{
		{Role: role, Handlers: []string{"h"}, ScopeProviders: []string{}, ScopeTypes: []string{}},
		{Role: role, Handlers: []string{"h"}, ScopeProviders: []string{""}, ScopeTypes: []string{"*"}},
		{Role: role, Handlers: []string{"h"}, ScopeProviders: []string{"stripe"}, ScopeTypes: nil},
		{Role: role, Handlers: []string{"h"}, ScopeProviders: []string{"stripe", "github"}, ScopeTypes: []string{"*"}},
	} {
		if _, err := q.CreateConsumerRole(ctx, bad); err == nil {
			t.Errorf("scopes %q / %q accepted; want refused", bad.ScopeProviders, bad.ScopeTypes)
		}
	}

	changes := func(p queries.CreateConsumerRoleParams) []string {
		t.Helper()
		rows, err := q.CreateConsumerRole(ctx, p)
		if err != nil {
			t.Fatalf("create consumer role %q: %v", p, err)
		}
		var out []string
		for _, r := range rows {
			out = append(out, r.Change+" "+r.Handler)
		}
		return out
	}
	t.Cleanup(func() { _, _ = q.DropConsumerRole(ctx, role) })
	if got, want := changes(queries.CreateConsumerRoleParams{Role: role, Handlers: []string{"h"},
		ScopeProviders: []string{"stripe", "github"}, ScopeTypes: []string{"*", "push"}}),
		[]string{"added h", "scope_added github:push", "scope_added stripe:*"}; !slices.Equal(got, want) {
		t.Errorf("create: %q, want %q", got, want)
	}
	if got, want := changes(queries.CreateConsumerRoleParams{Role: role, Handlers: []string{"h", "i"}}),
		[]string{"kept h", "added i"}; !slices.Equal(got, want) {
		t.Errorf("again without scopes: %q, want %q", got, want)
	}
	if got, want := changes(queries.CreateConsumerRoleParams{Role: role, Handlers: []string{"h"},
		ScopeProviders: []string{"stripe"}, ScopeTypes: []string{"*"}}),
		[]string{"kept h", "removed i", "scope_removed github:push", "scope_kept stripe:*"}; !slices.Equal(got, want) {
		t.Errorf("again with one scope: %q, want %q", got, want)
	}
	list, err := q.ListConsumerRoles(ctx, role)
	if err != nil || len(list) != 1 || !slices.Equal(list[0].Scopes, []string{"stripe:*"}) {
		t.Errorf("list: %+v, %v; want scopes [stripe:*]", list, err)
	}
	if _, err := q.DropConsumerRole(ctx, role); err != nil {
		t.Fatal(err)
	}
	var left int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM webhook_ingress.consumer_role_scopes WHERE role_name = $1`, role).Scan(&left); err != nil || left != 0 {
		t.Errorf("a dropped role left %d scopes (%v)", left, err)
	}
}

// Upgrading to 038 pins each consumer role to its handlers' enabled
// subscriptions as they stand: its consumer keeps registering them, and
// nothing wider.
func TestUpgradePinsConsumerRolesToTheirSubscriptions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, conn := migratedTo(t, 37)
	role := fmt.Sprintf("webhook_consumer_u%d_%d", os.Getpid(), roleSeq.Add(1))
	for _, q := range []string{
		`SELECT FROM webhook_ingress.create_consumer_role('` + role + `', '{billing,refunds}')`,
		`INSERT INTO webhook_ingress.subscriptions (handler, provider_pattern, event_type_pattern) VALUES
			('billing', 'stripe', 'invoice.*'), ('refunds', 'stripe', 'charge.refunded'), ('refunds', 'paddle', '*'), ('other', '*', '*')`,
		`INSERT INTO webhook_ingress.subscriptions (handler, provider_pattern, event_type_pattern, enabled) VALUES ('billing', '*', '*', false)`,
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	t.Cleanup(func() {
		_, _ = conn.Exec(context.Background(), `SELECT FROM webhook_ingress.drop_consumer_role($1)`, role)
	})
	if _, err := schema.MigrateTo(ctx, conn, 38); err != nil {
		t.Fatal(err)
	}
	rows, err := conn.Query(ctx, `SELECT provider_pattern || ':' || event_type_pattern FROM webhook_ingress.consumer_role_scopes
		WHERE role_name = $1 ORDER BY 1`, role)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if want := []string{"paddle:*", "stripe:charge.refunded", "stripe:invoice.*"}; err != nil || !slices.Equal(got, want) {
		t.Fatalf("scopes after the upgrade: %q, %v; want %q", got, err, want)
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if err := subscribeAs(t, pool, role, "billing", "stripe", "invoice.*"); err != nil {
		t.Errorf("the upgraded role re-registers billing's subscription: %v", err)
	}
	if err := subscribeAs(t, pool, role, "billing", "*", "*"); !isPermissionDenied(err) {
		t.Errorf("the upgraded role re-enables billing's old wide subscription: %v; want refused (42501)", err)
	}
}
