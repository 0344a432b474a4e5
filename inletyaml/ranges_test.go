package inletyaml

import (
	"fmt"
	"strings"
	"testing"

	"github.com/inlet-dev/inlet/internal/config"
)

// "settings out of range" are problems of the file (docs/configuration.md,
// Checking a file), bus.ack_wait and bus.replicas too. (Found by a review:
// a negative value passed inlet config check and every service, and the NATS
// bus silently replaced it with its default.)
func TestBusSettingsOutOfRangeAreProblems(t *testing.T) {
	t.Parallel()
	for _, doc := range []string{
		"bus: {kind: nats, url: nats://127.0.0.1:4222, ack_wait: -5s}\n",
		"bus: {kind: nats, url: nats://127.0.0.1:4222, replicas: -3}\n",
		"bus: {kind: nats, url: nats://127.0.0.1:4222, replicas: 6}\n",
	} {
		got := problems(t, doc, env(nil), config.AllSections)
		if len(got) == 0 {
			t.Errorf("%q: accepted; want a problem naming the key", doc)
		}
	}
	for _, doc := range []string{
		"bus: {kind: nats, url: nats://127.0.0.1:4222, ack_wait: 1m, replicas: 3}\n",
		"bus: {kind: nats, url: nats://127.0.0.1:4222}\n",
	} {
		if got := problems(t, doc, env(nil), config.AllSections); len(got) != 0 {
			t.Errorf("%q: %v; want no problem", doc, got)
		}
	}
}

// The scheduled reconcile of a source keyed by an id of its own would store
// every event again each round (the provider's API lists them under its
// own id): a problem of the file, as inlet backfill and inlet reconcile
// refuse it. (Noticed by a review: only those two commands checked.)
func TestReconcileOfASourceWithItsOwnIDIsAProblem(t *testing.T) {
	t.Parallel()
	const base = "sources:\n  - {name: pay, type: stripe, secrets: [whsec_x]%s}\n" +
		"reconcile: {enabled: true, sources: [{source: pay, type: stripe, api_key: rk_test_x}]}\n"
	got := problems(t, fmt.Sprintf(base, ", event_id_json: data.object.id"), env(nil), config.AllSections)
	if len(got) != 1 || !strings.Contains(got[0], "reconcile.sources[0]") || !strings.Contains(got[0], "event_id_json") {
		t.Errorf("reconcile of a source keyed by data.object.id: %q; want one problem naming reconcile.sources[0] and event_id_json", got)
	}
	for _, own := range []string{"", ", event_id_json: id"} {
		if got := problems(t, fmt.Sprintf(base, own), env(nil), config.AllSections); len(got) != 0 {
			t.Errorf("reconcile of a source keyed by Stripe's id (%q): %q; want no problem", own, got)
		}
	}
}

// The admin API serves raw bodies and replays: with Inlet's public
// development token it may listen on loopback only. (Found by a review:
// inlet dev with INLET_ADMIN_LISTEN=0.0.0.0:PORT served it with that token,
// without a word.)
func TestPublicAdminTokenOnlyOnLoopback(t *testing.T) {
	t.Parallel()
	const public = "inlet-dev-admin-token"
	for _, c := range []struct {
		listen, token string
		problem       bool
	}{
		{"0.0.0.0:8084", public, true},
		{"192.0.2.1:8084", public, true},
		{":8084", public, true},
		{"127.0.0.1:8084", public, false},
		{"localhost:8084", public, false},
		{"[::1]:8084", public, false},
		{"0.0.0.0:8084", "a-token-of-our-own-0123", false},
	} {
		doc := fmt.Sprintf("admin: {listen: %q, token: %q}\n", c.listen, c.token)
		got := problems(t, doc, env(nil), config.AllSections)
		hit := false
		for _, p := range got {
			hit = hit || strings.Contains(p, "admin.token")
		}
		if hit != c.problem {
			t.Errorf("admin.listen %s with token %q: problems %q; want an admin.token problem: %v", c.listen, c.token, got, c.problem)
		}
	}
}
