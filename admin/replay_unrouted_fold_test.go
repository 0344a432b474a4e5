package admin_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/inlet-dev/inlet/admin"
)

// An Unrouted replay sees every unrouted event committed before it, folded
// or not, whoever calls it; and POST /api/replay offers it as the CLI's
// --unrouted does.
//
// Regression test (review helper-194; the text describes the code before
// the fix). admin.Replay with Unrouted selects the unrouted events from
// event_types, which the streamer folds only every silence.types_every:
// only cmd/inlet/replay.go called admin.FoldEventTypes first, so any other
// caller missed the events stored since the last fold (here: the direct
// dry run found 0 to create, want 1). And POST /api/replay had no
// "unrouted" field at all (400 "unknown field"), although the API is
// documented to offer the CLI's operations. Now Replay folds first itself,
// as webhook_operator (fold_event_types is SECURITY DEFINER, granted to
// that role, and serialized with the streamer's fold by an advisory lock),
// and the API takes "unrouted": true with "handler".
func TestUnroutedReplayFoldsFirstAndIsOfferedByTheAPI(t *testing.T) {
	t.Parallel()
	b := setupAPI(t)
	ctx := context.Background()
	// Stored while nobody routes customer.*, never folded (no streamer runs).
	b.insert(t, event{source: "stripe", id: "evt_u1", eventType: "customer.created", body: []byte("{}")})
	b.subscribe(t, "crm", "stripe", "customer.*", 5)

	res, err := admin.Replay(ctx, b.op, admin.ReplayRequest{Handler: "crm", Unrouted: true, DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	if res.Created != 1 {
		t.Fatalf("unrouted dry run before any fold: %+v, want 1 to create: the event stored since the last fold is missed", res)
	}

	// Another type nobody routes arrives after that (folded) dry run, and
	// a second handler subscribes to it later: the API's run folds too.
	b.insert(t, event{source: "stripe", id: "evt_u2", eventType: "invoice.paid", body: []byte("{}")})
	b.subscribe(t, "ledger", "stripe", "invoice.*", 5)
	code, _, body := b.call(t, "POST", "/api/replay", `{"handler": "ledger", "unrouted": true}`)
	if code != http.StatusOK {
		t.Fatalf("POST /api/replay unrouted: %d %s", code, body)
	}
	var got admin.ReplayResult
	if err := json.Unmarshal(body, &got); err != nil {
		t.Fatal(err)
	}
	if n := b.count(t, `SELECT count(*) FROM webhook_ingress.jobs WHERE handler = 'ledger'`); got.Created != 1 || n != 1 {
		t.Fatalf("POST /api/replay unrouted: %s, ledger has %d jobs; want 1 created (its event arrived since the last fold)", body, n)
	}
	// The event types listed agree: both events counted unrouted.
	if n := b.count(t, `SELECT coalesce(sum(unrouted_events), 0) FROM webhook_ingress.event_types WHERE provider = 'stripe'`); n != 2 {
		t.Fatalf("event_types counts %d unrouted stripe events, want 2", n)
	}
}
