package admin_test

import (
	"net/http"
	"net/url"
	"testing"
)

// Regression test for a defect found by review helper-94 (fixed; the text below
// describes the behaviour before the fix).
//
// TestListRefusesOneFilterUnderBothNames: since 58d1815 GET /api/events and
// GET /api/dlq refuse a filter "given twice (only the first counted)", but
// the same filter given twice under its two accepted names
// (source/provider, type/event_type, external_id/external_event_id) is still
// taken silently: `?source=stripe&provider=github` lists stripe's events
// only, the github value dropped without a word — exactly the
// "only one value counts" the change set out to refuse.
//
// Expected: 400 naming both parameters (or the one filter given twice).
// Root cause: admin/api.go params.only checks each key on its own
// (len(p.q[k]) > 1); params.str("source", "provider") then takes the first
// set name and ignores the other.
func TestListRefusesOneFilterUnderBothNames(t *testing.T) {
	t.Parallel()
	b := setupAPI(t)
	for _, q := range []url.Values{
		{"source": {"stripe"}, "provider": {"github"}},
		{"type": {"invoice.paid"}, "event_type": {"charge.succeeded"}},
		{"external_id": {"evt_1"}, "external_event_id": {"evt_2"}},
	} {
		code, _, body := b.call(t, "GET", "/api/events?"+q.Encode(), "")
		if code != http.StatusBadRequest {
			t.Errorf("GET /api/events?%s: %d %s; want 400 (one filter given twice, one value ignored)", q.Encode(), code, body)
		}
	}
	q := url.Values{"source": {"stripe"}, "provider": {"github"}}
	if code, _, body := b.call(t, "GET", "/api/dlq?"+q.Encode(), ""); code != http.StatusBadRequest {
		t.Errorf("GET /api/dlq?%s: %d %s; want 400", q.Encode(), code, body)
	}
}
