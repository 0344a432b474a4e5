package consumers_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/inlet-dev/inlet/consumers"
	"github.com/inlet-dev/inlet/consumers/internal/consumertest"
	"github.com/inlet-dev/inlet/schema/queries"
)

var roleSeq atomic.Int64

// consumerRolePool makes a consumer role running handlers (inlet roles
// create-consumer) and opens the service's pool as it, as a team's consumer
// would; the role is dropped when the test ends (roles are cluster-wide).
func consumerRolePool(t *testing.T, b *testBundle, handlers ...string) *consumers.Config {
	t.Helper()
	return scopedRolePool(t, b, "*", handlers...)
}

// scopedRolePool is consumerRolePool for a role whose scope is the sources
// sourcePattern matches (every type).
func scopedRolePool(t *testing.T, b *testBundle, sourcePattern string, handlers ...string) *consumers.Config {
	t.Helper()
	ctx := context.Background()
	role := fmt.Sprintf("webhook_consumer_c%d_%d", os.Getpid(), roleSeq.Add(1))
	if _, err := queries.New(b.Admin).CreateConsumerRole(ctx, queries.CreateConsumerRoleParams{Role: role, Handlers: handlers,
		ScopeProviders: []string{sourcePattern}, ScopeTypes: []string{"*"}}); err != nil {
		t.Fatal(err)
	}
	pool, err := consumers.OpenPoolAs(ctx, b.Admin.Config().ConnString(), role, "consumer-role-test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		pool.Close()
		if _, err := queries.New(b.Admin).DropConsumerRole(ctx, role); err != nil {
			t.Errorf("drop role %s: %v", role, err)
		}
	})
	cfg := b.config()
	cfg.Pool = pool
	return &cfg
}

// A service running as a team's own consumer role works its handler as
// webhook_worker would (register, say it is alive, read, fail with history,
// complete), while another team's handler on the same events is left alone;
// declaring a handler the role does not run fails at Start, naming it.
func TestServiceAsConsumerRole(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	if _, err := b.Admin.Exec(ctx, `INSERT INTO webhook_ingress.subscriptions (handler, provider_pattern) VALUES ('other-team', 'stripe')`); err != nil {
		t.Fatal(err)
	}

	cfg := consumerRolePool(t, b, "billing")
	var calls atomic.Int32
	var body atomic.Pointer[[]byte]
	cfg.Handlers = []consumers.Handler{{Name: "billing", Provider: "stripe", Backoff: noBackoff,
		Func: func(_ context.Context, e *consumers.Event) error {
			if calls.Add(1) == 1 {
				return errors.New("first attempt fails")
			}
			body.Store(&e.Body)
			return nil
		}}}
	b.start(t, *cfg)
	b.StartStreamer(t, consumertest.StreamerOptions{})

	eventID := b.InsertEvent(t, consumertest.EventParams{Provider: "stripe", EventType: "invoice.paid", Body: []byte(`{"id":"evt_role"}`)})
	billing := b.JobID(t, eventID, "billing")
	b.WaitJobStatus(t, billing, "completed", wait)
	if got := body.Load(); got == nil || string(*got) != `{"id":"evt_role"}` {
		t.Errorf("the handler got body %v", got)
	}
	if got := b.Outcomes(t, billing); !slices.Equal(got, []string{"failed", "completed"}) {
		t.Errorf("billing's attempts: %v, want [failed completed]", got)
	}
	var alive []string
	rows, err := b.Admin.Query(ctx, `SELECT handler FROM webhook_ingress.consumers ORDER BY handler`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var h string
		if err := rows.Scan(&h); err != nil {
			t.Fatal(err)
		}
		alive = append(alive, h)
	}
	if !slices.Equal(alive, []string{"billing"}) {
		t.Errorf("liveness rows for %v, want [billing]", alive)
	}

	// Another team's handler in the same service: refused by PostgreSQL at
	// registration.
	bad := consumerRolePool(t, b, "billing")
	bad.Handlers = []consumers.Handler{
		{Name: "billing", Provider: "stripe", Func: ok},
		{Name: "other-team", Provider: "*", Func: ok},
	}
	svc, err := consumers.New(*bad)
	if err != nil {
		t.Fatal(err)
	}
	err = svc.Start(ctx)
	if err == nil {
		_ = svc.Stop(ctx)
		t.Fatal("a service declaring another team's handler started")
	}
	if !strings.Contains(err.Error(), `handler "other-team" is not one of this database role's handlers`) {
		t.Errorf("start: %v, want the handler named", err)
	}
	var patterns string
	if err := b.Admin.QueryRow(ctx, `SELECT string_agg(handler || ' ' || provider_pattern || ' ' || enabled, ', ' ORDER BY handler)
		FROM webhook_ingress.subscriptions`).Scan(&patterns); err != nil {
		t.Fatal(err)
	}
	if patterns != "billing stripe true, other-team stripe true" {
		t.Errorf("subscriptions after the refused start: %s", patterns)
	}
}

// A handler declaring events outside its role's scope (every source, under
// a scope of stripe) fails at Start, naming the pattern and the scope, and
// registers nothing: a team cannot subscribe itself to another team's
// events (038_consumer_role_scopes).
func TestServiceOutsideItsScopeFailsAtStart(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	cfg := scopedRolePool(t, b, "stripe", "billing")
	cfg.Handlers = []consumers.Handler{{Name: "billing", Provider: "*", Func: ok}}
	svc, err := consumers.New(*cfg)
	if err != nil {
		t.Fatal(err)
	}
	err = svc.Start(ctx)
	if err == nil {
		_ = svc.Stop(ctx)
		t.Fatal("a service subscribing outside its role's scope started")
	}
	if !strings.Contains(err.Error(), `handler "billing" may not subscribe to ("*", "*"): outside this database role's scopes`) {
		t.Errorf("start: %v, want the pattern and the scope named", err)
	}
	var n int
	if err := b.Admin.QueryRow(ctx, `SELECT count(*) FROM webhook_ingress.subscriptions`).Scan(&n); err != nil || n != 0 {
		t.Errorf("%d subscriptions after the refused start (%v), want none", n, err)
	}

	cfg.Handlers = []consumers.Handler{{Name: "billing", Provider: "stripe", EventType: "invoice.*", Func: ok}}
	b.start(t, *cfg)
}
