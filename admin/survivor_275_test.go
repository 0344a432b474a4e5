package admin_test

import (
	"context"
	"testing"

	"github.com/inlet-dev/inlet/admin"
)

// TestSurvivor275_CatchUpSkipsADisabledSubscription guards that a replay to
// a handler (catch-up of its missing jobs, `inlet replay --handler H`)
// creates jobs only for events an ENABLED subscription of the handler
// routes: a subscription disabled (retired) routes nothing at arrival, and
// a catch-up must not route its events either, dry run or not.
//
// Mutant: schema/queries/admin.sql:283 and :299 (AdminCountMissingJobs,
// AdminCreateMissingJobs; schema/queries/admin.sql.go:74, :111) with
// `AND s.enabled` dropped from the subscription lookup. Every existing
// replay test (admin/replay_test.go, admin/catchup_keys_test.go,
// tests/admin_test.go) replays handlers whose subscriptions are all
// enabled, so the catch-up then created a job for every stored event of
// the disabled subscription's source and no test noticed.
func TestSurvivor275_CatchUpSkipsADisabledSubscription(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.subscribe(t, "billing", "stripe", "*", 3)
	b.subscribe(t, "billing", "github", "*", 3)
	b.exec(t, `UPDATE webhook_ingress.subscriptions SET enabled = false WHERE handler = 'billing' AND provider_pattern = 'github'`)
	b.exec(t, `INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, event_type, raw_body, signature_verified)
		VALUES ('stripe', 'stripe', 'evt_s275_1', 'invoice.paid', '{}', true),
		       ('github', 'github', 'gh_s275_1', 'push', '{}', true),
		       ('github', 'github', 'gh_s275_2', 'push', '{}', true)`)
	if n := b.count(t, `SELECT count(*) FROM webhook_ingress.jobs WHERE handler = 'billing' AND provider = 'github'`); n != 0 {
		t.Fatalf("fan-out gave the disabled subscription's events %d jobs, want 0", n)
	}
	// One stripe event missing its job: the catch-up has something to do.
	b.exec(t, `INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, event_type, raw_body, signature_verified)
		VALUES ('stripe', 'stripe', 'evt_s275_2', 'invoice.paid', '{}', true)`)
	b.exec(t, `DELETE FROM webhook_ingress.jobs WHERE handler = 'billing' AND event_id = (SELECT id FROM webhook_ingress.events WHERE external_event_id = 'evt_s275_2')`)

	plan, err := admin.Replay(ctx, b.op, admin.ReplayRequest{Handler: "billing", EventType: "*", DryRun: true})
	if err != nil {
		t.Fatalf("dry run: %v", err)
	}
	if plan.Created != 1 {
		t.Errorf("dry run plans %d new jobs, want 1 (the stripe event only; the github subscription is disabled): %+v", plan.Created, plan)
	}
	res, err := admin.Replay(ctx, b.op, admin.ReplayRequest{Handler: "billing", EventType: "*"})
	if err != nil {
		t.Fatalf("replay: %v", err)
	}
	if res.Created != 1 {
		t.Errorf("replay created %d jobs, want 1 (the stripe event only): %+v", res.Created, res)
	}
	if n := b.count(t, `SELECT count(*) FROM webhook_ingress.jobs WHERE handler = 'billing' AND provider = 'github'`); n != 0 {
		t.Errorf("after the catch-up the disabled subscription's github events have %d billing jobs, want 0", n)
	}
	if n := b.count(t, `SELECT count(*) FROM webhook_ingress.jobs WHERE handler = 'billing' AND provider = 'stripe'`); n != 2 {
		t.Errorf("after the catch-up %d stripe billing jobs, want 2", n)
	}
}
