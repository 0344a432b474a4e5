package backfill

import (
	"fmt"
	"net/http"

	"github.com/inlet-dev/inlet/ingress/sources"
)

// providerIDs is where each provider's webhooks carry the id its API lists
// events under: Stripe's body id, GitHub's X-GitHub-Delivery header.
var providerIDs = map[string]struct{ json, header string }{
	"stripe": {json: "id"},
	"github": {header: "X-Github-Delivery"},
}

// CheckSourceIDs refuses a source whose events ingress keys by an id of the
// source's own choosing (event_id_json, event_id_header): a backfill or
// reconcile stores what the provider's API lists under the provider's id,
// so every event that had arrived by webhook would be stored again, and its
// handlers run twice.
func CheckSourceIDs(s sources.Source) error {
	own := providerIDs[s.Type]
	switch {
	case s.EventIDJSON != "" && s.EventIDJSON != own.json:
		return fmt.Errorf("source %q keys its events by the body's %s (event_id_json), not by %s's event id, which its API lists events under: backfill and reconcile would store every event again", s.Name, s.EventIDJSON, s.Type)
	case s.EventIDHeader != "" && http.CanonicalHeaderKey(s.EventIDHeader) != own.header:
		return fmt.Errorf("source %q keys its events by the %s header (event_id_header), not by %s's event id, which its API lists events under: backfill and reconcile would store every event again", s.Name, s.EventIDHeader, s.Type)
	}
	return nil
}
