package backfill_test

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/backfill"
)

// TestSurvivor254_ReconcileKeysBySourceName guards the dedupe key reconcile
// shares with ingress: an event is (provider = the source's name,
// external_event_id), so a source whose name is not its type
// ("stripe_live" of type stripe) finds the events its webhooks delivered
// already stored, and stores a missing one under its own name, where the
// next run (and every handler subscribed to the source) finds it.
//
// Mutant (helper-254): backfill/reconcile.go:310, storeMissing's
// `Provider: cfg.Source` changed to `Provider: cfg.Scheme`. Every existing
// reconcile test names its source after its type ("stripe", "github"), so
// the two were the same value and the mutant passed; with it a reconciled
// event lands under "stripe", the next run reports it missing again and
// stores it once more (its handlers run twice).
func TestSurvivor254_ReconcileKeysBySourceName(t *testing.T) {
	t.Parallel()
	const source = "stripe_live"
	b := setupReconcile(t)
	b.subscribe(t, "billing", source)
	now := time.Now().UTC().Truncate(time.Second)
	since, until := now.Add(-24*time.Hour), now
	events := []reconcileEvent{
		{id: "evt_s3", typ: "invoice.paid", at: now.Add(-3 * time.Hour), delivered: true},
		{id: "evt_s2", typ: "invoice.paid", at: now.Add(-4 * time.Hour), delivered: false},
		{id: "evt_s1", typ: "invoice.paid", at: now.Add(-5 * time.Hour), delivered: true},
	}
	srv := httptest.NewServer(&listStripe{events: events, pageSize: 10})
	defer srv.Close()
	b.deliver(t, source, "stripe", events, stripeEventJSON)
	l, err := backfill.NewStripe(backfill.StripeConfig{APIKey: "sk_test_reconcile", BaseURL: srv.URL, Since: since, Until: until})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	run, err := backfill.Reconcile(ctx, b.config(source, "stripe", since, until, false), l)
	if err != nil {
		t.Fatal(err)
	}
	checkReport(t, run, backfill.Counts{Listed: 3, AlreadyStored: 2, Missing: 1, Stored: 1}, map[string]backfill.Counts{
		"invoice.paid": {Listed: 3, AlreadyStored: 2, Missing: 1, Stored: 1},
	})
	if got := b.events(t, source); len(got) != 3 {
		ids := make([]string, 0, len(got))
		for id := range got {
			ids = append(ids, id)
		}
		t.Errorf("%d events stored under source %q (%v), want 3 (2 delivered, 1 reconciled)", len(got), source, ids)
	}
	if n := b.count(t, `SELECT count(*) FROM webhook_ingress.events WHERE provider <> $1`, source); n != 0 {
		t.Errorf("%d events stored under another provider than the source's name %q, want 0", n, source)
	}

	again, err := backfill.Reconcile(ctx, b.config(source, "stripe", since, until, false), l)
	if err != nil {
		t.Fatal(err)
	}
	checkReport(t, again, backfill.Counts{Listed: 3, AlreadyStored: 3}, map[string]backfill.Counts{
		"invoice.paid": {Listed: 3, AlreadyStored: 3},
	})
	if n := b.count(t, `SELECT count(*) FROM webhook_ingress.jobs WHERE handler = 'billing'`); n != 3 {
		t.Errorf("%d billing jobs, want 3 (one per event, none twice)", n)
	}
}
