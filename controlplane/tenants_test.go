package controlplane_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inlet-dev/inlet/controlplane"
)

// A token selects exactly one tenant (doc.go): two tenants given one token
// are refused at start, naming both. Before (noticed by review helper-162),
// New took them, and tenantOf answered the last, so one data plane's
// reports were stored and shown as another tenant's. Two tokens of one name
// (a rotation) stay allowed.
func TestNewRefusesTwoTenantsWithOneToken(t *testing.T) {
	pool, err := pgxpool.New(context.Background(), "postgres://nobody@127.0.0.1:1/none") // never connected: New reads no row
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	const shared = "0123456789abcdef-shared"
	_, err = controlplane.New(controlplane.Config{Pool: pool, Tenants: []controlplane.Tenant{
		{Name: "alpha", Token: shared}, {Name: "beta", Token: "0123456789abcdef-beta"}, {Name: "gamma", Token: shared},
	}})
	if err == nil || !strings.Contains(err.Error(), `tenants[2] ("gamma")`) || !strings.Contains(err.Error(), `tenants[0] ("alpha")`) {
		t.Fatalf("two tenants with one token: %v, want an error naming both", err)
	}
	if strings.Contains(err.Error(), shared) {
		t.Errorf("the error prints the token: %v", err)
	}
	if _, err := controlplane.New(controlplane.Config{Pool: pool, Tenants: []controlplane.Tenant{
		{Name: "alpha", Token: shared}, {Name: "alpha", Token: "0123456789abcdef-next"},
	}}); err != nil {
		t.Errorf("two tokens of one tenant (a rotation): %v", err)
	}
}
