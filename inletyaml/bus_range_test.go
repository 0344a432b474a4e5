package inletyaml

import (
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
