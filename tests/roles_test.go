package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/internal/pgtest"
)

// roleRuns tells this process's runs of TestRolesCreateListDrop apart
// (-count): roles are cluster-wide.
var roleRuns atomic.Int64

// inlet roles, as the schema owner: create a team's consumer role with a
// login member, change its handlers and scopes, list it, refuse a role that
// is not a consumer role, and drop it; what PostgreSQL then lets the role do is
// schema's TestConsumerRolesCannotTouchEachOthersRows.
func TestRolesCreateListDrop(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	env := cleanEnv("DATABASE_URL=" + url)
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	// Closed after the cleanup below (cleanups run last first), which
	// drops the roles with it: a deferred Close would run before it, and
	// the roles would outlive the test (a second -count then failed on
	// "role already exists").
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	// Roles are cluster-wide: names of this run only.
	name := fmt.Sprintf("payments_%d_%d", os.Getpid(), roleRuns.Add(1))
	role := "webhook_consumer_" + name
	login, workerLogin, taken := "login_"+name, "worker_login_"+name, "webhook_consumer_taken_"+name
	for _, sql := range []string{
		"CREATE ROLE " + login + " LOGIN",
		"CREATE ROLE " + workerLogin + " LOGIN IN ROLE webhook_worker",
		"CREATE ROLE " + taken + " NOLOGIN",
	} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, r := range []string{role, login, workerLogin, taken} {
			_, _ = conn.Exec(context.Background(), "DROP ROLE IF EXISTS "+r)
		}
	})
	handlersOf := func() []string {
		t.Helper()
		rows, err := conn.Query(ctx, `SELECT handler FROM webhook_ingress.consumer_roles WHERE role_name = $1 ORDER BY handler`, role)
		if err != nil {
			t.Fatal(err)
		}
		hs, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		return hs
	}

	// A new role needs a scope.
	_, errOut, code := runInlet(t, env, "roles", "create-consumer", name, "--handlers", "billing,refunds")
	if code != 1 || !strings.Contains(errOut, "has no scope") || !strings.Contains(errOut, "--scope") {
		t.Fatalf("create-consumer without a scope: exit %d, stderr %q; want refused, naming --scope", code, errOut)
	}
	out, errOut, code := runInlet(t, env, "roles", "create-consumer", name, "--handlers", "billing,refunds", "--member", login,
		"--scope", "stripe", "--scope", "paddle:transaction.*")
	if code != 0 || !strings.Contains(out, "created consumer role "+role) || !strings.Contains(out, "granted to "+login) ||
		!strings.Contains(out, "consumer.db_role: "+role) || errOut != "" {
		t.Fatalf("create-consumer: exit %d\n%s\n%s", code, out, errOut)
	}
	if hs := handlersOf(); !slices.Equal(hs, []string{"billing", "refunds"}) {
		t.Fatalf("handlers %v", hs)
	}
	var member, inherits bool
	if err := conn.QueryRow(ctx, `SELECT pg_has_role($1, $2, 'MEMBER'), pg_has_role($2, 'webhook_consumer', 'USAGE')`, login, role).Scan(&member, &inherits); err != nil || !member || !inherits {
		t.Fatalf("%s member of %s: %v; %s has webhook_consumer's privileges: %v (%v)", login, role, member, role, inherits, err)
	}

	// Again: the handlers become the new list, the scopes too; a member
	// that can reach webhook_worker is warned about.
	out, errOut, code = runInlet(t, env, "roles", "create-consumer", role, "--handlers", "billing,payouts", "--member", workerLogin,
		"--scope", "stripe:*")
	if code != 0 || !strings.Contains(out, "updated consumer role "+role) || !strings.Contains(errOut, workerLogin+" is also a member of webhook_worker") {
		t.Fatalf("create-consumer again: exit %d\n%s\n%s", code, out, errOut)
	}
	for _, want := range []string{"billing", "kept", "payouts", "added", "refunds", "removed", "SCOPE", "paddle:transaction.*", "stripe:*"} {
		if !strings.Contains(out, want) {
			t.Errorf("create-consumer again does not say %q:\n%s", want, out)
		}
	}
	if hs := handlersOf(); !slices.Equal(hs, []string{"billing", "payouts"}) {
		t.Fatalf("handlers after the update %v", hs)
	}

	out, errOut, code = runInlet(t, env, "roles", "list", name, "--json")
	var page struct {
		Items []struct {
			Role     string   `json:"role"`
			Handlers []string `json:"handlers"`
			Scopes   []string `json:"scopes"`
			Members  []string `json:"members"`
		} `json:"items"`
	}
	err = json.Unmarshal([]byte(out), &page)
	list := page.Items
	if code != 0 || err != nil || len(list) != 1 || list[0].Role != role ||
		!slices.Equal(list[0].Handlers, []string{"billing", "payouts"}) || !slices.Equal(list[0].Scopes, []string{"stripe:*"}) ||
		!slices.Equal(list[0].Members, []string{login, workerLogin}) {
		t.Fatalf("list --json: exit %d\n%s\n%s", code, out, errOut)
	}
	if out, _, code = runInlet(t, env, "roles", "list"); code != 0 || !strings.Contains(out, role) || !strings.Contains(out, "billing,payouts") ||
		!strings.Contains(out, "stripe:*") {
		t.Fatalf("list: exit %d\n%s", code, out)
	}

	// A role that exists and is not a consumer role is not taken over.
	_, errOut, code = runInlet(t, env, "roles", "create-consumer", taken, "--handlers", "billing", "--scope", "*")
	if code != 1 || !strings.Contains(errOut, "is not a consumer role") || strings.Count(strings.TrimSpace(errOut), "\n") != 0 {
		t.Fatalf("create-consumer over an existing role: exit %d, stderr %q", code, errOut)
	}
	_, errOut, code = runInlet(t, env, "roles", "drop-consumer", taken)
	if code != 1 || !strings.Contains(errOut, "is not a consumer role") {
		t.Fatalf("drop-consumer of a role that is not one: exit %d, stderr %q", code, errOut)
	}

	out, errOut, code = runInlet(t, env, "roles", "drop-consumer", name)
	if code != 0 || !strings.Contains(out, "dropped consumer role "+role+" (handlers: billing,payouts)") {
		t.Fatalf("drop-consumer: exit %d\n%s\n%s", code, out, errOut)
	}
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_roles WHERE rolname = $1)`, role).Scan(&exists); err != nil || exists {
		t.Fatalf("role %s still exists: %v", role, err)
	}
	if hs := handlersOf(); len(hs) != 0 {
		t.Fatalf("handler rows left: %v", hs)
	}
	// A role named and not found is an error (review helper-167), as for
	// events show or dlq show.
	if out, errOut, code := runInlet(t, env, "roles", "list", name); code != 1 || !strings.Contains(errOut, "no consumer role "+role) {
		t.Fatalf("list after drop: exit %d\n%s%s", code, out, errOut)
	}
}
