package admin_test

import (
	"context"
	"testing"

	"github.com/inlet-dev/inlet/admin"
)

// A type first counted in '_other' (its source was at the cap) gets a named
// row once the operator raises silence.max_types_per_source. The unrouted
// catch-up lost the events it brought while it was in '_other' (a review
// proved it): the '_other' branch of AdminCountUnroutedJobs and
// AdminCreateUnroutedJobs skipped every event whose type had a named row by
// then, and the named branch starts at that row's first_unrouted_at (its
// first event after the raise). The '_other' branch now keeps a type's
// events from before its named row's first_seen.
func TestUnroutedCatchUpAfterTheTypeCapIsRaised(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()

	// Cap 1: push takes the only named slot, issues goes to _other.
	b.insert(t, event{source: "github", id: "gh_push", eventType: "push", body: []byte("{}")})
	if err := admin.FoldEventTypes(ctx, b.op, 1); err != nil {
		t.Fatal(err)
	}
	b.insert(t, event{source: "github", id: "gh_issues_1", eventType: "issues", body: []byte("{}")})
	b.insert(t, event{source: "github", id: "gh_issues_2", eventType: "issues", body: []byte("{}")})
	if err := admin.FoldEventTypes(ctx, b.op, 1); err != nil {
		t.Fatal(err)
	}
	// The operator raises the cap to 2; one more issues event arrives.
	b.insert(t, event{source: "github", id: "gh_issues_3", eventType: "issues", body: []byte("{}")})
	if _, err := admin.EventTypes(ctx, b.op, 2); err != nil {
		t.Fatal(err)
	}
	// A handler now subscribes to issues: three issues events created no job.
	b.subscribe(t, "triage", "github", "issues", 3)
	res, err := admin.Replay(ctx, b.op, admin.ReplayRequest{Handler: "triage", Unrouted: true, DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	if res.Created != 3 {
		t.Errorf("unrouted catch-up dry run for triage counts %d events, want 3 (every issues event without a job)", res.Created)
	}
	res, err = admin.Replay(ctx, b.op, admin.ReplayRequest{Handler: "triage", Unrouted: true})
	if err != nil {
		t.Fatal(err)
	}
	if n := b.count(t, `SELECT count(*) FROM webhook_ingress.jobs WHERE handler = 'triage'`); n != 3 {
		t.Errorf("unrouted catch-up created %d jobs for triage (result %+v), want 3", n, res)
	}
}
