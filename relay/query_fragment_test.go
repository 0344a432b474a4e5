package relay_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"
)

// A request line may carry a '#' in its query (a server takes it as part of
// the query: request URIs have no fragment). The relay signed the query with
// it, then built its forward URL by parsing a string, which cut the '#' and
// what followed as a fragment: the ingress saw another query than the one
// signed and refused it (relay_signature_mismatch), a webhook lost on every
// retry. The query must reach the ingress exactly as the provider sent it.
func TestRelayForwardsQueryWithHashAsSent(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	body := []byte(`{"id":"evt_relay_hash","type":"invoice.paid"}`)
	req := stripeRequest(t, b.relayURL, body, time.Now())
	req.URL.RawQuery = "attempt=1#frag"
	code, answer, _ := do(t, req)
	if code != http.StatusOK || strings.TrimSpace(answer) != `{"status":"stored"}` {
		t.Fatalf("relay answered %d %s", code, answer)
	}
	var uri string
	err := b.admin.QueryRow(context.Background(), `SELECT request_uri FROM webhook_ingress.events
		WHERE provider = 'stripe' AND external_event_id = 'evt_relay_hash'`).Scan(&uri)
	if err != nil {
		t.Fatal(err)
	}
	if uri != "/webhooks/stripe?attempt=1#frag" {
		t.Fatalf("request_uri = %q, want the query as sent", uri)
	}
}
