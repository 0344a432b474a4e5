package ingress_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/ingress"
	"github.com/inlet-dev/inlet/internal/database"
	"github.com/inlet-dev/inlet/internal/pgtest"
	"github.com/inlet-dev/inlet/schema"
)

// DESIGN requires synchronous_commit=on for the ingest transaction (the 2xx
// relies on the commit being durable). Ingress inherited whatever the
// database, the login role or DATABASE_URL's options said (a review proved
// it): with a common throughput tuning (ALTER DATABASE … SET
// synchronous_commit = off) every 200 went out before the event's WAL was
// flushed. database.Open now raises it to on, and keeps remote_apply.
func TestIngressCommitsSynchronously(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := pgtest.NewDatabase(t)
	b := setupWith(t, dbURL, func(*ingress.Config) {})
	var db string
	if err := b.admin.QueryRow(ctx, `SELECT current_database()`).Scan(&db); err != nil {
		t.Fatal(err)
	}
	if _, err := b.admin.Exec(ctx, `ALTER DATABASE `+pgx.Identifier{db}.Sanitize()+` SET synchronous_commit = off`); err != nil {
		t.Fatal(err)
	}
	// The pool ingress opens (cmd/inlet/ingress.go does the same).
	pool, err := database.Open(ctx, dbURL, database.Options{Role: schema.IngressRole, AppName: "inlet-ingress"})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	var setting string
	if err := pool.QueryRow(ctx, `SHOW synchronous_commit`).Scan(&setting); err != nil {
		t.Fatal(err)
	}
	if setting != "on" {
		t.Errorf("the ingress session runs with synchronous_commit=%s: a 2xx can precede the durable commit", setting)
	}

	// A stronger setting is kept.
	if _, err := b.admin.Exec(ctx, `ALTER DATABASE `+pgx.Identifier{db}.Sanitize()+` SET synchronous_commit = remote_apply`); err != nil {
		t.Fatal(err)
	}
	strong, err := database.Open(ctx, dbURL, database.Options{Role: schema.IngressRole, AppName: "inlet-ingress"})
	if err != nil {
		t.Fatal(err)
	}
	defer strong.Close()
	if err := strong.QueryRow(ctx, `SHOW synchronous_commit`).Scan(&setting); err != nil {
		t.Fatal(err)
	}
	if setting != "remote_apply" {
		t.Errorf("synchronous_commit=remote_apply on the database became %s for ingress; want it kept", setting)
	}
}
