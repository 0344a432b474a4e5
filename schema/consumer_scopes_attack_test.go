package schema_test

// Attempts to get a consumer role around its scopes
// (038_consumer_role_scopes), from an adversarial review: two of them (the
// order keys of a narrowed scope's jobs, a shared handler's jobs of another
// role's scope) and a stale-scope flaw got through the first version of
// 038, which then hid a role's jobs outside its scopes and cleared the rows
// a role dropped by hand had left.

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/internal/pgtest"
	"github.com/inlet-dev/inlet/schema"
	"github.com/inlet-dev/inlet/schema/queries"
)

// Narrowing a role's scope: its consumer's next start, configuration
// unchanged, is refused even though nothing changed (the INSERT policy's
// WITH CHECK applies to the proposed row before the conflict is seen). The
// refusal aborts Register before DisableOtherSubscriptions, so the wide row
// stays enabled (docs/operations.md says so): it goes on fanning out, into
// jobs the role cannot see (the order_key test below).
func TestNarrowedScopeRefusesTheUnchangedRestart(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	role := newScopedConsumerRole(t, pool, [][2]string{{"*", "*"}}, "team-a")
	if err := subscribeAs(t, pool, role, "team-a", "*", "*"); err != nil {
		t.Fatalf("team-a registers '*' under scope '*': %v", err)
	}
	// The operator narrows the role to stripe.
	if _, err := queries.New(pool).CreateConsumerRole(ctx, queries.CreateConsumerRoleParams{Role: role, Handlers: []string{"team-a"},
		ScopeProviders: []string{"stripe"}, ScopeTypes: []string{"*"}}); err != nil {
		t.Fatal(err)
	}
	// The consumer restarts with its unchanged configuration.
	err := subscribeAs(t, pool, role, "team-a", "*", "*")
	var enabled bool
	if qerr := pool.QueryRow(ctx, `SELECT enabled FROM webhook_ingress.subscriptions
		WHERE handler = 'team-a' AND provider_pattern = '*' AND event_type_pattern = '*'`).Scan(&enabled); qerr != nil {
		t.Fatal(qerr)
	}
	if !isPermissionDenied(err) {
		t.Errorf("after the scope narrowed to stripe, the consumer's next start re-registers team-a for '*': err = %v, subscription enabled = %v; want refused (42501) as docs/operations.md says", err, enabled)
	}
	if !enabled {
		t.Errorf("the refused start disabled the wide subscription (documenting: it was expected to stay enabled)")
	}
}

// A wider subscription left enabled (scope narrowed, as above; or enabled
// before 038, or by the owner) still gets a job of every event outside the
// scope, and the owner's fan-out copies the value its order_key names in the
// body or headers into jobs.order_key: the role must not see those jobs.
func TestNarrowedScopeHidesOrderKeysOutsideIt(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	role := newScopedConsumerRole(t, pool, [][2]string{{"*", "*"}}, "team-a-body", "team-a-header")
	// While its scope is '*', the team registers its handlers ordered by a
	// body path and by a header: allowed, every event is in scope.
	for _, s := range [][2]string{{"team-a-body", "data.object.customer"}, {"team-a-header", "header:Authorization"}} {
		if err := asRoleCommit(t, pool, role, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, schema.Query("UpsertSubscription"), s[0], "*", "*", 5, nil, s[1], "block")
			return err
		}); err != nil {
			t.Fatalf("register %s ordered by %s: %v", s[0], s[1], err)
		}
	}
	// The operator narrows the role to stripe. Team b's github events are
	// now outside it.
	if _, err := queries.New(pool).CreateConsumerRole(ctx, queries.CreateConsumerRoleParams{Role: role,
		Handlers: []string{"team-a-body", "team-a-header"}, ScopeProviders: []string{"stripe"}, ScopeTypes: []string{"*"}}); err != nil {
		t.Fatal(err)
	}
	// The consumer's next start is refused (its declared '*' is outside
	// stripe), which leaves both wide rows enabled.
	for _, h := range []string{"team-a-body", "team-a-header"} {
		if err := subscribeAs(t, pool, role, h, "*", "*"); !isPermissionDenied(err) {
			t.Fatalf("restart re-registering %s for '*': %v; want refused", h, err)
		}
	}
	leakInsertEvent(t, pool, "github", "evt_team_b")

	bodies, err := leakStrings(t, pool, role, `SELECT convert_from(raw_body, 'UTF8') FROM webhook_ingress.events WHERE provider = 'github'`)
	if err != nil || len(bodies) != 0 {
		t.Fatalf("the role reads github bodies %q (%v); the events policy should hide them", bodies, err)
	}
	got, err := leakStrings(t, pool, role, `SELECT handler || ' ' || provider || ' ' || coalesce(order_key, '<null>')
		FROM webhook_ingress.jobs WHERE provider = 'github' ORDER BY handler`)
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range got {
		if strings.Contains(g, leakSecretBody) || strings.Contains(g, leakSecretHeader) {
			t.Errorf("consumer role %s (scope stripe) reads a body/header value of a github event outside its scope through jobs.order_key, after its narrowed scope refused its restart: %q", role, g)
		}
	}
}

// The consumer's real path, inside its scope: the streamer leases the job
// and the role's FetchJobs returns the body; the job of an event outside the
// scope (a subscription enabled by the owner) is not the role's to fetch,
// complete or give back.
func TestScopedConsumerTakesOnlyJobsInsideItsScope(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	role := newScopedConsumerRole(t, pool, [][2]string{{"stripe", "thing.*"}}, "team-a")
	if err := subscribeAs(t, pool, role, "team-a", "stripe", "thing.happened"); err != nil {
		t.Fatalf("in-scope registration: %v", err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO webhook_ingress.subscriptions (handler, provider_pattern) VALUES ('team-a', 'github')`); err != nil {
		t.Fatal(err)
	}
	stripe := leakInsertEvent(t, pool, "stripe", "evt_s")
	github := leakInsertEvent(t, pool, "github", "evt_g")
	jobs := claimAll(t, pool)
	in, ok := jobs[fmt.Sprintf("team-a/%d", stripe)]
	if !ok {
		t.Fatalf("no leased job of the stripe event: %v", jobs)
	}
	var n int64
	err := asRole(t, pool, role, func(tx pgx.Tx) error {
		var err error
		n, err = fetch(in)(tx)
		return err
	})
	if err != nil || n != 1 {
		t.Errorf("the role fetches its in-scope job: %d rows with a body, %v; want 1", n, err)
	}
	out, ok := jobs[fmt.Sprintf("team-a/%d", github)]
	if !ok {
		t.Fatalf("no leased job of the github event: %v", jobs)
	}
	err = asRole(t, pool, role, func(tx pgx.Tx) error {
		var err error
		n, err = fetch(out)(tx)
		return err
	})
	if n != 0 || err != nil {
		t.Errorf("the role fetches its out-of-scope job: %d rows, %v; want none (not its to take)", n, err)
	}
	for what, do := range map[string]func(pgx.Tx) (int64, error){"complete": complete(out), "give back": giveBack(out)} {
		err = asRole(t, pool, role, func(tx pgx.Tx) error {
			var err error
			n, err = do(tx)
			return err
		})
		if n != 0 || err != nil {
			t.Errorf("the role may %s its out-of-scope job: %d rows, %v; want none", what, n, err)
		}
	}
}

// The coverage rule (P inside S when P, as text, is LIKE S's LIKE pattern)
// checked exhaustively over short patterns of a, *, _, %, \ and a multibyte
// character: whenever a subscription pattern is allowed under a scope, no
// value it matches (in the fan-out's own LIKE) falls outside the scope.
func TestScopeCoverageIsSoundExhaustively(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	// The LIKE pattern of a glob, read from the generated column's own
	// expression so the check follows the migration.
	var expr string
	if err := pool.QueryRow(ctx, `SELECT pg_get_expr(d.adbin, d.adrelid)
		FROM pg_attrdef d JOIN pg_attribute a ON a.attrelid = d.adrelid AND a.attnum = d.adnum
		WHERE d.adrelid = 'webhook_ingress.consumer_role_scopes'::regclass AND a.attname = 'provider_like'`).Scan(&expr); err != nil {
		t.Fatal(err)
	}
	likeOf := func(col string) string { return strings.ReplaceAll(expr, "provider_pattern", col) }
	sql := `
WITH RECURSIVE alpha(c) AS (VALUES ('a'), ('*'), ('_'), ('%'), ('\'), ('é')),
pats(p) AS (SELECT '' UNION ALL SELECT p || c FROM pats, alpha WHERE length(p) < 3),
walpha(c) AS (VALUES ('a'), ('b'), ('_'), ('%'), ('\'), ('é'), ('*')),
words(w) AS (SELECT '' UNION ALL SELECT w || c FROM words, walpha WHERE length(w) < 4),
lp AS (SELECT p AS provider_pattern, ` + likeOf("p") + ` AS l FROM pats),
allowed AS (SELECT s.provider_pattern AS s, s.l AS sl, p.provider_pattern AS p, p.l AS pl
            FROM lp s, lp p WHERE p.provider_pattern LIKE s.l)
SELECT format('scope %L allows %L, which matches %L outside it', a.s, a.p, w.w)
FROM allowed a, words w
WHERE w.w LIKE a.pl AND NOT w.w LIKE a.sl
LIMIT 5`
	var pairs int
	if err := pool.QueryRow(ctx, strings.Replace(sql[:strings.Index(sql, "SELECT format(")], "", "", 1)+
		`SELECT count(*) FROM allowed a WHERE a.s <> a.p`).Scan(&pairs); err != nil || pairs < 1000 {
		t.Fatalf("only %d distinct allowed (scope, pattern) pairs checked (%v): the check would prove nothing", pairs, err)
	}
	t.Logf("%d distinct allowed (scope, pattern) pairs checked", pairs)
	rows, err := pool.Query(ctx, sql)
	if err != nil {
		t.Fatal(err)
	}
	bad, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if len(bad) != 0 {
		t.Errorf("unsound coverage: %q", bad)
	}
}

// A consumer role dropped by hand (DROP ROLE, not inlet roles drop-consumer)
// leaves its scopes; a new role of the same name made without --scope must
// not take them over: it is refused ("a new role needs at least one").
func TestRecreatedRoleDoesNotInheritStaleScopes(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	q := queries.New(pool)
	role := fmt.Sprintf("webhook_consumer_x%d_%d", os.Getpid(), roleSeq.Add(1))
	if _, err := q.CreateConsumerRole(ctx, queries.CreateConsumerRoleParams{Role: role, Handlers: []string{"h"},
		ScopeProviders: []string{"*"}, ScopeTypes: []string{"*"}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = q.DropConsumerRole(ctx, role)
		_, _ = pool.Exec(ctx, `DELETE FROM webhook_ingress.consumer_role_scopes WHERE role_name = $1`, role)
		_, _ = pool.Exec(ctx, `DELETE FROM webhook_ingress.consumer_roles WHERE role_name = $1`, role)
	})
	if _, err := pool.Exec(ctx, `DROP ROLE `+role); err != nil {
		t.Fatal(err)
	}
	_, err := q.CreateConsumerRole(ctx, queries.CreateConsumerRoleParams{Role: role, Handlers: []string{"other"}})
	list, _ := q.ListConsumerRoles(ctx, role)
	if err == nil || !strings.Contains(err.Error(), "has no scope") {
		var scopes []string
		if len(list) == 1 {
			scopes = list[0].Scopes
		}
		t.Errorf("a new role %s made without --scope after a DROP ROLE by hand: %v; scopes %q; want refused, saying it has no scope", role, err, scopes)
	}
}

// Statements a consumer role might use to reach rows outside its scopes and
// that were checked to be refused or filtered: re-enabling, upserting over,
// or rewriting the order key / filter of a wide row; inserting it disabled
// and enabling it; writing patterns (no column grant); reading the
// attempts view, order_lanes, event_keys; going to SET ROLE webhook_consumer.
func TestScopeHoldsOnOtherPaths(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `INSERT INTO webhook_ingress.subscriptions (handler) VALUES ('team-a')`); err != nil {
		t.Fatal(err)
	}
	role := newScopedConsumerRole(t, pool, [][2]string{{"stripe", "*"}}, "team-a")
	leakInsertEvent(t, pool, "github", "evt_g")
	for _, sql := range []string{
		`UPDATE webhook_ingress.subscriptions SET order_key = 'data.object.customer' WHERE handler = 'team-a'`,
		`UPDATE webhook_ingress.subscriptions SET filter = 'true' WHERE handler = 'team-a'`,
		`UPDATE webhook_ingress.subscriptions SET max_attempts = 7 WHERE handler = 'team-a'`,
		`INSERT INTO webhook_ingress.subscriptions (handler, provider_pattern, event_type_pattern, order_key)
		 VALUES ('team-a', '*', '*', 'data.object.customer')
		 ON CONFLICT (handler, provider_pattern, event_type_pattern) DO UPDATE SET order_key = excluded.order_key`,
		`UPDATE webhook_ingress.subscriptions SET provider_pattern = 'stripe' WHERE handler = 'team-a'`,
		`SELECT count(*) FROM webhook_ingress.attempts`,
		`SELECT count(*) FROM webhook_ingress.order_lanes`,
		`SELECT count(*) FROM webhook_ingress.event_keys`,
	} {
		err := asRole(t, pool, role, exec(sql))
		if !isPermissionDenied(err) {
			t.Errorf("%s: %v; want refused (42501)", sql, err)
		}
	}
	// Disabled out of scope, then enabled: refused at the UPDATE.
	if err := asRole(t, pool, role, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO webhook_ingress.subscriptions (handler, provider_pattern, event_type_pattern, enabled)
			VALUES ('team-a', 'github', '*', false)`); err != nil {
			t.Fatalf("insert disabled: %v", err)
		}
		_, err := tx.Exec(ctx, `UPDATE webhook_ingress.subscriptions SET enabled = true WHERE provider_pattern = 'github'`)
		return err
	}); !isPermissionDenied(err) {
		t.Errorf("enable a disabled out-of-scope row: %v; want refused", err)
	}
	// As webhook_consumer itself: nothing.
	var n int
	if err := asRole(t, pool, role, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SET LOCAL ROLE webhook_consumer`); err != nil {
			return err
		}
		return tx.QueryRow(ctx, `SELECT count(*) FROM webhook_ingress.events`).Scan(&n)
	}); err != nil || n != 0 {
		t.Errorf("SET ROLE webhook_consumer: %d events, %v; want none", n, err)
	}
	// The events a fan-out gave the role outside its scope stay hidden,
	// whatever the query shape.
	for _, sql := range []string{
		`SELECT convert_from(raw_body, 'UTF8') FROM webhook_ingress.events`,
		`SELECT convert_from(e.raw_body, 'UTF8') FROM webhook_ingress.jobs j JOIN webhook_ingress.events e ON e.id = j.event_id`,
		`SELECT payload::text FROM webhook_ingress.events WHERE provider LIKE '%'`,
	} {
		got, err := leakStrings(t, pool, role, sql)
		if err != nil || slices.ContainsFunc(got, func(s string) bool { return strings.Contains(s, leakSecretBody) }) {
			t.Errorf("%s: %q, %v; want nothing", sql, got, err)
		}
	}
}

// A handler may belong to several consumer roles (011: "e.g. while one
// team's role replaces another's"). Each role keeps inside its own scope:
// role B (scope github) registers the shared handler for github, ordered by
// a body path. Role A (scope stripe) reads none of the github bodies, nor
// the shared handler's github jobs: their order_key (a body value) and the
// error texts B's handler wrote (which may quote the body, 036).
func TestSharedHandlerJobsStayInTheirRolesScopes(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	roleA := newScopedConsumerRole(t, pool, [][2]string{{"stripe", "*"}}, "shared")
	roleB := newScopedConsumerRole(t, pool, [][2]string{{"github", "*"}}, "shared")
	if err := asRoleCommit(t, pool, roleB, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, schema.Query("UpsertSubscription"), "shared", "github", "*", 5, nil, "data.object.customer", "block")
		return err
	}); err != nil {
		t.Fatalf("role B registers shared for github (its scope): %v", err)
	}
	leakInsertEvent(t, pool, "github", "evt_b")
	// B's handler fails the job with an error quoting the body.
	if err := asRoleCommit(t, pool, roleB, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `UPDATE webhook_ingress.jobs SET last_error = $1, updated_at = now() WHERE provider = 'github'`, leakSecretError)
		return err
	}); err != nil {
		t.Fatalf("role B writes its job's error: %v", err)
	}
	if bodies, err := leakStrings(t, pool, roleA, `SELECT convert_from(raw_body, 'UTF8') FROM webhook_ingress.events`); err != nil || len(bodies) != 0 {
		t.Fatalf("role A reads github bodies %q, %v", bodies, err)
	}
	got, err := leakStrings(t, pool, roleA, `SELECT provider || ' ' || coalesce(order_key, '') || ' ' || coalesce(last_error, '')
		FROM webhook_ingress.jobs`)
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range got {
		if strings.Contains(g, leakSecretBody) || strings.Contains(g, leakSecretError) {
			t.Errorf("consumer role A (scope stripe) reads values of a github event (role B's scope) through the shared handler's job: %q", g)
		}
	}
}
