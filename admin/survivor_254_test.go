package admin_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/admin"
)

// TestSurvivor254_WhereListingKeepsTheOccurredWindow guards the event
// listing's documented bounds (admin/events.go EventFilter: OccurredAfter
// inclusive, OccurredBefore exclusive; schema/queries/admin.sql) on both of
// its paths: AdminListEvents and, with a --where JSON path,
// AdminListEventsWhere, which must apply the same occurred_at window.
//
// Mutants (helper-254): admin/events.go:310, in the Where branch,
// `OccurredAfter: arg.OccurredAfter, OccurredBefore: arg.OccurredBefore`
// swapped to `OccurredAfter: arg.OccurredBefore, OccurredBefore:
// arg.OccurredAfter`; and the occurred_after bound made exclusive (>= to >)
// in AdminListEvents / AdminListEventsWhere. TestListEventsWhereAndOccurred
// tests the occurred bounds only without a path, and only with bounds a
// minute away from every stored occurred_at, so neither the swap on the
// Where path nor the inclusive/exclusive edges were ever observed.
func TestSurvivor254_WhereListingKeepsTheOccurredWindow(t *testing.T) {
	t.Parallel()
	b := setup(t)
	occ := whereSetup(t, b) // evt_a at occ, evt_b at occ+1h, evt_c none
	list := func(f admin.EventFilter) ([]string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		page, err := admin.ListEvents(ctx, b.op, f)
		var got []string
		for _, e := range page.Events {
			got = append(got, e.ExternalEventID)
		}
		return got, err
	}
	const anyCustomer = `$.data.object.customer like_regex "^cus_"`
	for _, where := range []string{"", anyCustomer} {
		cases := []struct {
			name string
			f    admin.EventFilter
			want []string
		}{
			{"after, between", admin.EventFilter{OccurredAfter: occ.Add(time.Minute)}, []string{"evt_b"}},
			{"before, between", admin.EventFilter{OccurredBefore: occ.Add(time.Minute)}, []string{"evt_a"}},
			{"window around a", admin.EventFilter{OccurredAfter: occ.Add(-time.Minute), OccurredBefore: occ.Add(time.Minute)}, []string{"evt_a"}},
			{"after is inclusive", admin.EventFilter{OccurredAfter: occ.Add(time.Hour)}, []string{"evt_b"}},
			{"before is exclusive", admin.EventFilter{OccurredBefore: occ.Add(time.Hour)}, []string{"evt_a"}},
			{"[a, b) holds a only", admin.EventFilter{OccurredAfter: occ, OccurredBefore: occ.Add(time.Hour)}, []string{"evt_a"}},
		}
		for _, c := range cases {
			c.f.Where = where
			got, err := list(c.f)
			if err != nil || !slices.Equal(got, c.want) {
				t.Errorf("where %q, %s: got %v (%v), want %v", where, c.name, got, err, c.want)
			}
		}
	}
}

// TestSurvivor254_ReverifyReadsTheRawBytesNotThePayloadCopy guards `inlet
// events verify` (admin.Reverify): it recomputes each signature from the
// stored raw_body, the bytes the provider signed, never from the payload
// jsonb copy (store_json), whose text is PostgreSQL's rendering of them
// (other spacing, key order, number forms) and which the audit does not
// treat as the record.
//
// Mutant (helper-254): schema/queries/admin.sql AdminEventsToVerify (and
// its generated string in admin.sql.go) selecting
// `coalesce(convert_to(payload::text, 'UTF8'), raw_body) AS raw_body`
// instead of `raw_body`. Every Reverify test stores its events without a
// payload copy (testBundle.insert names no payload column), so the
// coalesce always fell back to raw_body and the mutant passed; with it
// every event stored with store_json on (the default for JSON providers)
// reports signature_mismatch.
func TestSurvivor254_ReverifyReadsTheRawBytesNotThePayloadCopy(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	id := b.ingest(t, "stripe", "evt_with_copy")
	// The JSON copy ingress keeps with store_json, added to the stored row
	// (its append-only trigger off for it, as the setup's owner may).
	b.exec(t, `ALTER TABLE webhook_ingress.events DISABLE TRIGGER events_append_only_row`)
	b.exec(t, `UPDATE webhook_ingress.events SET payload = webhook_ingress.jsonb_of(raw_body) WHERE id = $1`, id)
	b.exec(t, `ALTER TABLE webhook_ingress.events ENABLE ALWAYS TRIGGER events_append_only_row`)
	if n := b.count(t, `SELECT count(*) FROM webhook_ingress.events WHERE id = $1 AND payload IS NOT NULL
		AND convert_to(payload::text, 'UTF8') <> raw_body`, id); n != 1 {
		t.Fatal("setup: the event has no payload copy differing in bytes from raw_body")
	}
	rep, err := admin.Reverify(ctx, b.op, b.sources, admin.VerifyRequest{ID: id})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Checked != 1 || rep.Verified != 1 || rep.Failed != 0 {
		t.Errorf("re-verify of a genuine event stored with a payload copy: %+v; want it verified from raw_body", rep)
	}
}
