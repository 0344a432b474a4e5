package admin_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/inlet-dev/inlet/admin"
)

// Regression test (review helper-93; fixed: the text describes the behaviour
// before the fix). a subscription's content filter is invisible to operators. The
// filter decides which events a handler gets (issue 19 part 3), but
// admin.ListSubscriptions (admin/subscriptions.go:13-24, the Subscription
// type) and its query AdminSubscriptions (schema/queries/admin.sql:331-337)
// do not carry the filter column, so `inlet subscriptions list` (table and
// --json, its only user) shows a filtered subscription exactly like an
// unfiltered one. An operator asking "why did
// handler big get no job for this charge.succeeded event?" sees an enabled
// subscription (stripe, charge.*) and nothing that explains the miss; the
// only place the expression is visible is a superuser's SELECT on the table.
//
// Expected: the listing includes each subscription's filter (e.g. JSON key
// "filter", a FILTER column in the table; empty/absent for none), so a
// filtered and an unfiltered subscription can be told apart.
func TestSubscriptionsListShowsTheFilter(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	const expr = `payload.data.object.amount > 10000`
	b.exec(t, `INSERT INTO webhook_ingress.subscriptions (handler, provider_pattern, event_type_pattern, filter)
		VALUES ('big', 'stripe', 'charge.*', $1), ('all', 'stripe', 'charge.*', NULL)`, expr)
	subs, err := admin.ListSubscriptions(ctx, b.op, "")
	if err != nil || len(subs) != 2 {
		t.Fatalf("list: %d subscriptions, %v", len(subs), err)
	}
	var big, all []byte
	for _, s := range subs {
		j, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		switch s.Handler {
		case "big":
			big = j
		case "all":
			all = j
		}
	}
	if !strings.Contains(string(big), `amount \u003e 10000`) && !strings.Contains(string(big), `amount > 10000`) {
		t.Errorf("the listing of the filtered subscription does not show its filter %q:\n  big: %s\n  all: %s", expr, big, all)
	}
}
