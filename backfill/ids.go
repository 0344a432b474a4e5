package backfill

import (
	"fmt"
	"net/http"

	"github.com/inlet-dev/inlet/ingress/sources"
)

// providerIDs is where each provider's webhooks carry the id its API lists
// events under: Stripe's body id, GitHub's X-GitHub-Delivery header.
var providerIDs = map[string]struct{ json, header, typeHeader string }{
	"stripe": {json: "id"},
	"github": {header: "X-Github-Delivery", typeHeader: "X-Github-Event"},
}

// CheckSourceIDs refuses a source whose events ingress keys by an id of the
// source's own choosing (event_id_json, event_id_header): a backfill or
// reconcile stores what the provider's API lists under the provider's id,
// so every event that had arrived by webhook would be stored again, and its
// handlers run twice. It refuses an event type taken from a header other
// than the provider's own too (event_type_header): the API does not return
// it.
func CheckSourceIDs(s sources.Source) error {
	own := providerIDs[s.Type]
	switch {
	case s.EventIDJSON != "" && s.EventIDJSON != own.json:
		return fmt.Errorf("source %q keys its events by the body's %s (event_id_json), not by %s's event id, which its API lists events under: backfill and reconcile would store every event again", s.Name, s.EventIDJSON, s.Type)
	case s.EventIDHeader != "" && http.CanonicalHeaderKey(s.EventIDHeader) != own.header:
		return fmt.Errorf("source %q keys its events by the %s header (event_id_header), not by %s's event id, which its API lists events under: backfill and reconcile would store every event again", s.Name, s.EventIDHeader, s.Type)
	case s.EventTypeHeader != "" && http.CanonicalHeaderKey(s.EventTypeHeader) != own.typeHeader:
		// A type from the body (event_type_json) is read from the API's
		// copy of it; a header's is not in what the API returns.
		return fmt.Errorf("source %q takes its event type from the %s header (event_type_header), which %s's API does not return: backfill and reconcile would store its events without their type, and no handler subscribed to it would get them", s.Name, s.EventTypeHeader, s.Type)
	}
	return nil
}
