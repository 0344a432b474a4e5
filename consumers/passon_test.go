package consumers_test

import (
	"context"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/consumers/bus"
	"github.com/inlet-dev/inlet/consumers/internal/consumertest"
	"github.com/inlet-dev/inlet/schema/queries"
)

// PassOnAttempt (063) gives back uncounted only the lease of a job its
// caller's role may not see and another role of the handler may: not the
// caller's own job, not a stale lease, not a job no role can take (left to
// expire and count, as the docs say of a scope narrowed under enabled
// subscriptions), not for an unrestricted caller. A job passed on is due
// again after a pause, not at once (the other team down, it would circle
// as fast as claims run).
func TestPassOnAttemptOnlyForAnotherRolesJob(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	if _, err := b.Admin.Exec(ctx, `INSERT INTO webhook_ingress.subscriptions (handler, provider_pattern, event_type_pattern)
		VALUES ('shared', '*', '*')`); err != nil {
		t.Fatal(err)
	}
	teamA := scopedRolePool(t, b, "stripe", "shared").Pool
	scopedRolePool(t, b, "github", "shared") // team B: the github jobs are its

	own := b.InsertEvent(t, consumertest.EventParams{Provider: "stripe", EventType: "invoice.paid", Body: []byte(`{}`)})
	other := b.InsertEvent(t, consumertest.EventParams{Provider: "github", EventType: "push", Body: []byte(`{}`)})
	nobodys := b.InsertEvent(t, consumertest.EventParams{Provider: "paddle", EventType: "x", Body: []byte(`{}`)})
	refs := map[int64]bus.Ref{}
	for _, r := range b.ClaimOnce(t, time.Minute) {
		refs[r.EventID] = r
	}
	if len(refs) != 3 {
		t.Fatalf("claimed %d references, want 3", len(refs))
	}
	passOn := func(ref bus.Ref, leasedAt time.Time) bool {
		t.Helper()
		ok, err := queries.New(teamA).PassOnAttempt(ctx, queries.PassOnAttemptParams{
			JobID: ref.JobID, EventReceivedAt: ref.EventReceivedAt, Attempt: int32(ref.Attempt), LeasedAt: leasedAt})
		if err != nil {
			t.Fatalf("pass on job %d: %v", ref.JobID, err)
		}
		return ok
	}

	if passOn(refs[own], refs[own].LeasedAt) {
		t.Error("team A passed on its own job")
	}
	if passOn(refs[nobodys], refs[nobodys].LeasedAt) {
		t.Error("team A passed on a job no role can take (it would circle for ever)")
	}
	if passOn(refs[other], refs[other].LeasedAt.Add(time.Microsecond)) {
		t.Error("team A passed on another lease than the one it was sent")
	}
	if ok, err := queries.New(b.Admin).PassOnAttempt(ctx, queries.PassOnAttemptParams{JobID: refs[other].JobID,
		EventReceivedAt: refs[other].EventReceivedAt, Attempt: int32(refs[other].Attempt), LeasedAt: refs[other].LeasedAt}); err != nil || ok {
		t.Errorf("an unrestricted caller (sees every job) passed on: %v %v", ok, err)
	}
	for _, id := range []int64{own, nobodys, other} {
		if j := b.Job(t, b.JobID(t, id, "shared")); j.Status != "leased" || j.AttemptCount != 1 {
			t.Fatalf("job of event %d after the refused pass-ons: %s, attempt %d; want leased, 1", id, j.Status, j.AttemptCount)
		}
	}

	before := time.Now()
	if !passOn(refs[other], refs[other].LeasedAt) {
		t.Fatal("team A did not pass on team B's job")
	}
	j := b.Job(t, b.JobID(t, other, "shared"))
	if j.Status != "pending" || j.AttemptCount != 0 || j.LeaseExpiresAt != nil {
		t.Errorf("job passed on: %s, attempt %d, lease %v; want pending, 0 (uncounted), none", j.Status, j.AttemptCount, j.LeaseExpiresAt)
	}
	if pause := j.NextAttemptAt.Sub(before); pause < 500*time.Millisecond || pause > time.Minute+time.Second {
		t.Errorf("job passed on is due %v after, want a pause of 1 s to 1 min", pause)
	}
	if passOn(refs[other], refs[other].LeasedAt) {
		t.Error("passed on twice")
	}
}
