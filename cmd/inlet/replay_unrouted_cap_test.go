package main

import (
	"context"
	"os"
	"strings"
	"testing"
)

// `inlet replay --unrouted` folds the event types with the configuration's
// silence.max_types_per_source, as the streamer does: it passed the cap to
// its own fold but not to admin.Replay's, which folded again at the default
// (100), so the events committed between the two folds were counted under a
// cap of 100 (named types past the configured cap, or a real type left in
// _other for good: review helper-322). One fold now, with the configured cap.
func TestReplayUnroutedFoldsWithTheConfiguredCap(t *testing.T) {
	db := operatorDatabase(t)
	cfg := "silence:\n  max_types_per_source: 2\nsources:\n  - name: stripe\n    type: stripe\n    secrets: [\"whsec_replay_cap\"]\n"
	if err := os.WriteFile("inlet.yaml", []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := db.Exec(ctx, `INSERT INTO webhook_ingress.subscriptions (handler, provider_pattern, event_type_pattern) VALUES ('billing', 'stripe', 'invoice.*')`); err != nil {
		t.Fatal(err)
	}
	for _, typ := range []string{"a.one", "b.two", "c.three", "d.four"} {
		if _, err := db.Exec(ctx, `INSERT INTO webhook_ingress.events
			(provider, scheme, external_event_id, event_type, headers, request_uri, raw_body, signature_verified)
			VALUES ('stripe', 'stripe', 'evt_' || $1, $1, '{}', '/webhooks/stripe', '{}', true)`, typ); err != nil {
			t.Fatal(err)
		}
	}
	out, err := runInlet(t, "replay", "--unrouted", "--handler", "billing", "--source", "stripe", "--dry-run")
	if err != nil {
		t.Fatalf("inlet replay --unrouted --dry-run: %v\n%s", err, out)
	}
	rows, err := db.Query(ctx, `SELECT event_type FROM webhook_ingress.event_types WHERE provider = 'stripe' ORDER BY event_type`)
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		types = append(types, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(types, ","); got != "_other,a.one,b.two" {
		t.Fatalf("event types of stripe after inlet replay --unrouted with silence.max_types_per_source 2: %s; want _other,a.one,b.two", got)
	}
}
