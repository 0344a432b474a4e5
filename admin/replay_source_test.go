package admin_test

import (
	"context"
	"strings"
	"testing"

	"github.com/inlet-dev/inlet/admin"
)

// A replay naming a source that has stored no event is refused, naming the
// source: a misspelt --source matched nothing and said "replayed 0 jobs", as
// if the handler were up to date.
func TestReplayOfAnUnknownSourceIsRefused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.subscribe(t, "billing", "stripe", "*", 3)
	b.insert(t, event{source: "stripe", id: "evt_src_1", eventType: "invoice.paid", body: []byte("{}")})

	for _, req := range []admin.ReplayRequest{
		{Handler: "billing", Provider: "strpie", EventType: "*"},
		{Handler: "billing", Provider: "strpie", EventType: "*", DryRun: true},
		{Handler: "billing", Provider: "strpie", Unrouted: true},
	} {
		res, err := admin.Replay(ctx, b.op, req)
		wantErr(t, err, admin.ErrNotFound)
		if !strings.Contains(err.Error(), `"strpie"`) {
			t.Errorf("%+v: the error does not name the source: %v", req, err)
		}
		if res.Touched() != 0 {
			t.Errorf("%+v: touched %d jobs", req, res.Touched())
		}
	}

	// The right name still replays.
	res, err := admin.Replay(ctx, b.op, admin.ReplayRequest{Handler: "billing", Provider: "stripe", EventType: "*"})
	if err != nil {
		t.Fatalf("replay of source stripe: %v", err)
	}
	if res.Touched() != 1 {
		t.Fatalf("replay of source stripe touched %d jobs, want 1", res.Touched())
	}
}
