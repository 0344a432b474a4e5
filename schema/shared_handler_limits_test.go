package schema_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/schema"
)

// 080 runs twice (a rewound schema_migrations runs it again) and leaves one
// function and one policy; another_role_given answers for the roles
// consumer_roles gives a handler.
func TestMigration080RunsTwice(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, conn := migratedTo(t, 79)
	ms, err := schema.Migrations()
	if err != nil {
		t.Fatal(err)
	}
	m := ms[79]
	if m.Version != 80 {
		t.Fatalf("migration 80 is %03d_%s", m.Version, m.Name)
	}
	for run := 1; run <= 2; run++ {
		if err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, m.SQL)
			return err
		}); err != nil {
			t.Fatalf("%03d_%s run %d: %v", m.Version, m.Name, run, err)
		}
	}
	var policies int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_catalog.pg_policies
		WHERE schemaname = 'webhook_ingress' AND tablename = 'handler_limits' AND policyname = 'registrant_keeps_shared_limits'`).Scan(&policies); err != nil {
		t.Fatal(err)
	}
	if policies != 1 {
		t.Fatalf("%d policies registrant_keeps_shared_limits after running %03d_%s twice, want 1", policies, m.Version, m.Name)
	}

	if _, err := conn.Exec(ctx, `INSERT INTO webhook_ingress.consumer_roles (role_name, handler)
		VALUES ('team_a', 'shared'), ('team_b', 'shared'), ('team_a', 'own')`); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		role, handler string
		want          bool
	}{
		{"team_a", "shared", true},
		{"team_b", "shared", true},
		{"team_a", "own", false},
		{"webhook_worker", "own", true},
		{"webhook_worker", "nobody's", false},
	} {
		var got bool
		if err := conn.QueryRow(ctx, `SELECT webhook_ingress.another_role_given($1, $2)`, c.role, c.handler).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != c.want {
			t.Errorf("another_role_given(%q, %q) = %t, want %t", c.role, c.handler, got, c.want)
		}
	}
}
