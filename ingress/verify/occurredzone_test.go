//go:build !fuzzonly

package verify

import (
	"net/http"
	"testing"
	"time"
)

// TestOccurredAtZoneAbbreviationIsNotUTC (review helper-77).
//
// Defect: parseOccurred (ingress/verify/occurred.go, occurredLayouts) tries
// the layout "2006-01-02 15:04:05 MST", meant for GitLab's
// "2013-12-03 17:23:34 UTC". Go's time.Parse reads any other abbreviation it
// does not know in the process's local zone ("PST", "CET", "IST", ...) as
// a made-up zone with offset 0, so "2024-11-03 12:26:10 PST" is stored as
// 12:26:10 UTC: eight hours early, silently, and the result depends on
// the server's TZ. occurred_at_json / occurred_at_header document "Unix
// seconds or RFC 3339" and "a value that is no time is stored with
// occurred_at NULL"; a wrong time is worse than NULL (an ordered handler's
// lane sorts by it, inlet_ingress_delivery_lag reports eight hours of lag,
// auditors' occurred_at ranges miss the event).
//
// Expected: such a value is either read at its true instant or, since
// abbreviations are ambiguous (IST is +05:30, +01:00 or +02:00), NULL.
func TestOccurredAtZoneAbbreviationIsNotUTC(t *testing.T) {
	t.Parallel()
	utc := time.Date(2024, 11, 3, 12, 26, 10, 0, time.UTC)
	for _, tc := range []struct {
		value string
		want  time.Time // the true instant (or NULL is fine too)
	}{
		{"2024-11-03 12:26:10 PST", utc.Add(8 * time.Hour)},
		{"2024-11-03 12:26:10 CET", utc.Add(-1 * time.Hour)},
		{"2024-11-03 12:26:10 EST", utc.Add(5 * time.Hour)},
	} {
		for _, cfg := range []Config{
			{Type: "hmac", OccurredAtJSON: "sent_at"},
			{Type: "hmac", OccurredAtHeader: "X-Event-Time"},
		} {
			h := http.Header{"X-Event-Time": {tc.value}}
			body := []byte(`{"sent_at":"` + tc.value + `"}`)
			got := NewOccurredAt(cfg)(h, body)
			if !got.IsZero() && !got.Equal(tc.want) {
				t.Errorf("%q (occurred_at_json %q, occurred_at_header %q): stored as %s, %s off; want %s or NULL",
					tc.value, cfg.OccurredAtJSON, cfg.OccurredAtHeader, got.UTC().Format(time.RFC3339), got.Sub(tc.want), tc.want.Format(time.RFC3339))
			}
		}
	}
}
