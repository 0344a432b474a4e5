package ingress_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/ingress/verify"
)

// HubSpot's retry of a batch (attemptNumber raised) is answered duplicate.
//
// Regression test (review helper-124; fixed: the text describes the
// behaviour before the fix). The hubspot preset (ingress/verify/providers_timed.go, the "hubspot"
// entry) has no id: the event id is the synthetic SHA-256 of the body. HubSpot
// writes the attempt number INTO the body: every element of the batch carries
// attemptNumber, documented by HubSpot (Webhooks API, payload fields) as
// "Starting at 0, which number attempt this is to notify your service of this
// event. If your service times-out or throws an error ... HubSpot will attempt
// to send the notification again", and "Retries will occur with an exponential
// backoff based on the next attemptNumber" (up to 10 retries; HubSpot retries
// on a timeout and on any status but 400/401/403/404/405, so on Inlet's 503).
// A retry of the very same events therefore has different bytes and a
// different synthetic id, and is stored as a second event: every handler runs
// the same HubSpot events again.
//
// Inlet's contract: when the outcome of a write is unknown it answers 503 and
// "the provider's retry is then answered duplicate" (ingress/doc.go); "A
// duplicate delivery -> 2xx and no new rows" (DESIGN.md invariants). The docs
// table says only "none (synthetic body hash: the body is a batch of events,
// each with its eventId)", which reads as "retries are deduplicated by the
// hash"; unlike Dropbox and Microsoft Graph it does not say retries are stored
// again. (The preset's code comment does concede "attemptNumber changes" and
// leaves dedupe to handlers; the docs do not.)
//
// Expected: HubSpot's retry of one batch (same events, attemptNumber 0 -> 1,
// new X-HubSpot-Request-Timestamp and signature) is answered duplicate and
// leaves one event row.
func TestHubSpotRetryIsNotADuplicate(t *testing.T) {
	t.Parallel()
	const secret = "hubspot-client-secret-review"
	b := setupSource(t, "hubspot", verify.Config{Type: "hubspot", Secrets: []string{secret}})
	occurred := time.Now().Add(-time.Second).UnixMilli()
	send := func(attempt int) (int, string) {
		body := fmt.Appendf(nil, `[{"eventId":1745263710,"subscriptionId":2150032,"portalId":62515,"appId":1160452,"occurredAt":%d,"subscriptionType":"contact.propertyChange","attemptNumber":%d,"objectId":1246965,"propertyName":"lifecyclestage","propertyValue":"customer","changeFlag":"UPDATED","changeSource":"CRM","sourceId":"userId:1234567"},{"eventId":1745263711,"subscriptionId":2150033,"portalId":62515,"appId":1160452,"occurredAt":%d,"subscriptionType":"deal.creation","attemptNumber":%d,"objectId":9876543,"changeFlag":"CREATED","changeSource":"CRM"}]`,
			occurred, attempt, occurred, attempt)
		code, answer := postHubSpot(t, b, secret, body)
		t.Logf("attemptNumber %d: %d %s", attempt, code, answer)
		return code, answer
	}

	// Attempt 0 is stored, but HubSpot never saw the answer in time (or got
	// Inlet's 503 "outcome unknown" and the commit then landed): it retries
	// the same two events with attemptNumber 1.
	if code, answer := send(0); code != http.StatusOK {
		t.Fatalf("genuine HubSpot delivery answered %d %s", code, answer)
	}
	if code, answer := send(1); code != http.StatusOK {
		t.Fatalf("HubSpot's retry answered %d %s", code, answer)
	}

	n := storedOf(t, b, "hubspot")
	if n != 1 {
		t.Errorf("one HubSpot batch and HubSpot's retry of it (same eventIds, attemptNumber 0 -> 1): %d events stored, want 1 "+
			"(the id is the hash of a body that embeds attemptNumber, so a retry is never a duplicate)", n)
	}
}
