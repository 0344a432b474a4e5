package schema_test

import (
	"context"
	"testing"

	"github.com/inlet-dev/inlet/admin"
	"github.com/inlet-dev/inlet/internal/database"
	"github.com/inlet-dev/inlet/schema"
)

// A log upgraded to 013 holds events that created no job (a type nobody
// subscribed before the upgrade). `inlet replay --handler H --unrouted`
// picks events by one rule for the unfiltered and the filtered
// subscriptions: the types and times event_types counts as unrouted (from
// first_unrouted_at on). So --dry-run counts what the run creates, and a
// filter only narrows the catch-up. (Found by a review: the filtered part,
// AdminMissingFilteredCandidates, took any event with no job at all, the
// upgrade's seeded ones too: --dry-run promised 0 jobs and the run created
// 1, and an always-true filter caught up an event the same subscription
// without a filter did not.)
func TestUnroutedCatchUpDryRunMatchesRunAfterUpgrade(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, conn := migratedTo(t, 12)
	// Before the upgrade: an invoice.created nobody subscribes to (no job).
	if _, err := conn.Exec(ctx, `INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, event_type, headers, raw_body, signature_verified)
		VALUES ('stripe', 'stripe', 'evt_old_1', 'invoice.created', '{}', convert_to('{"id":"evt_old_1"}', 'UTF8'), true)`); err != nil {
		t.Fatal(err)
	}
	if _, err := schema.Migrate(ctx, conn); err != nil {
		t.Fatal(err)
	}
	// billing: an unfiltered subscription to invoice.created, and a filtered
	// one to invoice.* whose filter every invoice passes.
	// plain / filtered: the same pattern, without and with an always-true filter.
	if _, err := conn.Exec(ctx, `INSERT INTO webhook_ingress.subscriptions (handler, provider_pattern, event_type_pattern, max_attempts, filter) VALUES
		('billing', 'stripe', 'invoice.created', 5, NULL),
		('billing', 'stripe', 'invoice.*', 5, 'event.type.startsWith("invoice.")'),
		('plain', 'stripe', 'invoice.*', 5, NULL),
		('filtered', 'stripe', 'invoice.*', 5, 'event.type.startsWith("invoice.")')`); err != nil {
		t.Fatal(err)
	}
	op, err := database.Open(ctx, url, database.Options{Role: schema.OperatorRole, MaxConns: 2, AppName: "review-unrouted"})
	if err != nil {
		t.Fatal(err)
	}
	defer op.Close()
	if err := admin.FoldEventTypes(ctx, op, 100); err != nil {
		t.Fatal(err)
	}

	plain, err := admin.Replay(ctx, op, admin.ReplayRequest{Handler: "plain", Unrouted: true, DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	filtered, err := admin.Replay(ctx, op, admin.ReplayRequest{Handler: "filtered", Unrouted: true, DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	if plain.Created != filtered.Created {
		t.Errorf("--unrouted over the same pattern: without a filter %d jobs, with an always-true filter %d (a filter only narrows)",
			plain.Created, filtered.Created)
	}
	plan, err := admin.Replay(ctx, op, admin.ReplayRequest{Handler: "billing", Unrouted: true, DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	res, err := admin.Replay(ctx, op, admin.ReplayRequest{Handler: "billing", Unrouted: true})
	if err != nil {
		t.Fatal(err)
	}
	if plan.Created != res.Created {
		t.Errorf("billing --unrouted: --dry-run said %d jobs to create, the run created %d", plan.Created, res.Created)
	}

}
