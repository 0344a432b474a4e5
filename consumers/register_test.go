package consumers_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/consumers"
	"github.com/inlet-dev/inlet/consumers/internal/consumertest"
)

type subRow struct {
	ID        int64
	Handler   string
	Provider  string
	EventType string
	Max       int
	Enabled   bool
	UpdatedAt time.Time
}

func (r subRow) key() string {
	return fmt.Sprintf("%s %s %s max=%d enabled=%v", r.Handler, r.Provider, r.EventType, r.Max, r.Enabled)
}

func subscriptions(t *testing.T, b *testBundle) []subRow {
	t.Helper()
	rows, err := b.Admin.Query(context.Background(), `SELECT id, handler, provider_pattern, event_type_pattern, max_attempts, enabled, updated_at
		FROM webhook_ingress.subscriptions ORDER BY handler, provider_pattern, event_type_pattern`)
	if err != nil {
		t.Fatal(err)
	}
	subs, err := pgx.CollectRows(rows, pgx.RowToStructByPos[subRow])
	if err != nil {
		t.Fatal(err)
	}
	return subs
}

func keys(rs []subRow) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.key())
	}
	return out
}

func register(t *testing.T, b *testBundle, hs ...consumers.Handler) {
	t.Helper()
	svc, err := consumers.New(b.config(hs...))
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Register(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestRegister(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	billing := consumers.Handler{Name: "billing", Provider: "stripe", EventType: "invoice.*", Func: ok}
	audit := consumers.Handler{Name: "audit", Func: ok}

	// Start registers.
	b.start(t, b.config(billing, audit))
	first := subscriptions(t, b)
	want := []string{"audit * * max=25 enabled=true", "billing stripe invoice.* max=25 enabled=true"}
	if !slices.Equal(keys(first), want) {
		t.Fatalf("after Start: %v, want %v", keys(first), want)
	}

	// Registering the same set again changes nothing, not even updated_at.
	register(t, b, billing, audit)
	if again := subscriptions(t, b); !slices.Equal(again, first) {
		t.Fatalf("re-registering changed rows:\n%v\nwant\n%v", again, first)
	}

	// billing's patterns change (and its attempts); audit is not declared by
	// this service and keeps its row.
	billing2 := billing
	billing2.Patterns = []consumers.Pattern{{Provider: "stripe", EventType: "customer.*"}, {Provider: "github", EventType: "push"}}
	billing2.MaxAttempts = 5
	register(t, b, billing2)
	want = []string{
		"audit * * max=25 enabled=true",
		"billing github push max=5 enabled=true",
		"billing stripe customer.* max=5 enabled=true",
		"billing stripe invoice.* max=25 enabled=false",
	}
	if got := subscriptions(t, b); !slices.Equal(keys(got), want) {
		t.Fatalf("after changing patterns: %v, want %v", keys(got), want)
	}

	// Fan-out follows the new set: no billing job for an invoice any more.
	inv := b.InsertEvent(t, consumertest.EventParams{EventType: "invoice.paid"})
	cust := b.InsertEvent(t, consumertest.EventParams{EventType: "customer.created"})
	var handlers []string
	if err := b.Admin.QueryRow(ctx, `SELECT coalesce(array_agg(handler || ':' || max_attempts ORDER BY handler), '{}')
		FROM webhook_ingress.jobs WHERE event_id = $1`, inv).Scan(&handlers); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(handlers, []string{"audit:25"}) {
		t.Errorf("jobs of invoice event: %v", handlers)
	}
	if err := b.Admin.QueryRow(ctx, `SELECT array_agg(handler || ':' || max_attempts ORDER BY handler)
		FROM webhook_ingress.jobs WHERE event_id = $1`, cust).Scan(&handlers); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(handlers, []string{"audit:25", "billing:5"}) {
		t.Errorf("jobs of customer event: %v", handlers)
	}

	// Going back re-enables the old row (same id) and disables the others.
	register(t, b, billing)
	got := subscriptions(t, b)
	want = []string{
		"audit * * max=25 enabled=true",
		"billing github push max=5 enabled=false",
		"billing stripe customer.* max=5 enabled=false",
		"billing stripe invoice.* max=25 enabled=true",
	}
	if !slices.Equal(keys(got), want) {
		t.Fatalf("after reverting: %v, want %v", keys(got), want)
	}
	if got[3].ID != first[1].ID {
		t.Errorf("reverting made a new row %d instead of re-enabling %d", got[3].ID, first[1].ID)
	}
}

// A handler's filter is stored on each of its subscriptions, changed in
// place when it changes, and cleared when it goes.
func TestRegisterFilter(t *testing.T) {
	t.Parallel()
	b := setup(t)
	filters := func() []string {
		t.Helper()
		rows, err := b.Admin.Query(context.Background(), `SELECT provider_pattern || ' ' || coalesce(filter, '-') FROM webhook_ingress.subscriptions
			WHERE handler = 'f' AND enabled ORDER BY 1`)
		if err != nil {
			t.Fatal(err)
		}
		out, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	h := consumers.Handler{Name: "f", Func: ok, Patterns: []consumers.Pattern{{Provider: "stripe"}, {Provider: "github"}},
		Filter: `payload.amount > 10`}
	register(t, b, h)
	if got, want := filters(), []string{"github payload.amount > 10", "stripe payload.amount > 10"}; !slices.Equal(got, want) {
		t.Fatalf("after registering a filter: %q, want %q", got, want)
	}
	h.Filter = `event.type == "x"`
	register(t, b, h)
	if got, want := filters(), []string{`github event.type == "x"`, `stripe event.type == "x"`}; !slices.Equal(got, want) {
		t.Fatalf("after changing the filter: %q, want %q", got, want)
	}
	h.Filter = ""
	register(t, b, h)
	if got, want := filters(), []string{"github -", "stripe -"}; !slices.Equal(got, want) {
		t.Fatalf("after removing the filter: %q, want %q", got, want)
	}
}

// An order key is registered with its policy (a header name in canonical
// form, as ingress stores headers), and a job of the handler carries the
// key its event names: here a header.
func TestRegisterOrderKey(t *testing.T) {
	t.Parallel()
	b := setup(t)
	h := consumers.Handler{Name: "o", Func: ok, OrderKey: "header:x-shop-id", OrderPolicy: "skip"}
	register(t, b, h)
	var key, policy string
	if err := b.Admin.QueryRow(context.Background(), `SELECT order_key, order_policy FROM webhook_ingress.subscriptions WHERE handler = 'o'`).Scan(&key, &policy); err != nil {
		t.Fatal(err)
	}
	if key != "header:X-Shop-Id" || policy != "skip" {
		t.Fatalf("registered order_key %q, policy %q", key, policy)
	}
	jobID := b.JobID(t, b.InsertEvent(t, consumertest.EventParams{Headers: map[string][]string{"X-Shop-Id": {"shop-42"}}}), "o")
	var jobKey *string
	if err := b.Admin.QueryRow(context.Background(), `SELECT order_key FROM webhook_ingress.jobs WHERE id = $1`, jobID).Scan(&jobKey); err != nil {
		t.Fatal(err)
	}
	if jobKey == nil || *jobKey != "shop-42" {
		t.Fatalf("job's order_key %v, want shop-42", jobKey)
	}
}
