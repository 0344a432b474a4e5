package consumers_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/consumers"
)

// A handler shared by two consumer roles of different scopes (which
// docs/operations.md and 038 support) is registered by each role's consumer
// for its own scope; the second registration leaves the first role's
// subscription enabled (046). (Found by a review: it switched it off, and
// the stripe team's events stopped getting jobs.)
func TestSharedHandlerRegistrationKeepsOtherRolesSubscription(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()

	cfgA := scopedRolePool(t, b, "stripe", "shared")
	cfgA.Handlers = []consumers.Handler{{Name: "shared", Provider: "stripe", Func: ok}}
	svcA, err := consumers.New(*cfgA)
	if err != nil {
		t.Fatal(err)
	}
	if err := svcA.Register(ctx); err != nil {
		t.Fatal(err)
	}

	cfgB := scopedRolePool(t, b, "github", "shared")
	cfgB.Handlers = []consumers.Handler{{Name: "shared", Provider: "github", Func: ok}}
	svcB, err := consumers.New(*cfgB)
	if err != nil {
		t.Fatal(err)
	}
	if err := svcB.Register(ctx); err != nil {
		t.Fatal(err)
	}

	var enabled bool
	if err := b.Admin.QueryRow(ctx, `SELECT enabled FROM webhook_ingress.subscriptions
		WHERE handler = 'shared' AND provider_pattern = 'stripe' AND event_type_pattern = '*'`).Scan(&enabled); err != nil {
		t.Fatal(err)
	}
	if !enabled {
		t.Errorf("role B (scope github) registering its own scope's pattern of the shared handler disabled role A's (scope stripe) subscription %q: stripe events no longer get jobs of the handler", "shared stripe *")
	}
}

// Two replicas registering the same handler whose patterns are listed in a
// different order lock the subscription rows in one order (sorted), so
// neither is aborted. (Found by a review: they locked them in config order,
// crosswise, and PostgreSQL aborted one with a deadlock: Start failed.)
func TestConcurrentRegistrationsDoNotDeadlock(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	p1 := consumers.Pattern{Provider: "stripe", EventType: "*"}
	p2 := consumers.Pattern{Provider: "github", EventType: "*"}
	register(t, b, consumers.Handler{Name: "h", Func: ok, Patterns: []consumers.Pattern{p1, p2}})

	// Hold both rows so the two registrations start waiting together, as
	// two replicas starting at the same moment would.
	hold, err := b.Admin.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := hold.Exec(ctx, `SELECT FROM webhook_ingress.subscriptions WHERE handler = 'h' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}

	orders := [][]consumers.Pattern{{p1, p2}, {p2, p1}}
	errs := make([]error, len(orders))
	var wg sync.WaitGroup
	for i, ps := range orders {
		svc, err := consumers.New(b.config(consumers.Handler{Name: "h", Func: ok, Patterns: ps}))
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = svc.Register(ctx)
		}()
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		var waiting int
		if err := b.Admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%INSERT INTO webhook_ingress.subscriptions%'`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d registrations waiting, want 2", waiting)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := hold.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("registration %d (patterns %v) failed: %v", i, orders[i], err)
		}
	}
}
