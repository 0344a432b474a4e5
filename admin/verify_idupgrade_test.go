package admin_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/admin"
	"github.com/inlet-dev/inlet/ingress/verify"
)

// Sentry and HubSpot events stored before their id rules changed still
// verify (their stored ids are what the former rules gave).
//
// Regression test (review helper-126; fixed: the text describes the
// behaviour before the fix; presets name their former id rules,
// verify.FormerEventIDs). 6e78119 changed how the sentry and hubspot presets derive the
// event id (sentry: Request-ID header -> body digest; hubspot: body digest
// -> hash of subscriptionId:eventId pairs), and df93205 did the same for
// woocommerce. Re-verification (admin/verify.go check, behind `inlet events
// verify` and the admin API's verify) recomputes the id with the CURRENT
// rule and fails every stored event whose id differs ("event_id_changed:
// verifies, but with event id ..., not the stored one"). So after the
// upgrade every genuine Sentry and HubSpot event stored before it is
// reported as no longer verifying and `inlet events verify --since ...`
// exits 1, although nothing was altered: the body, headers and signature
// are intact and the stored id is exactly what ingress assigned then. An
// auditor is told the log was tampered with; the CHANGELOG mentions only
// that a retry across the upgrade is stored twice.
//
// Expected: a Sentry event stored by the previous version (external id =
// its Request-ID, signature valid) and a HubSpot event stored by it
// (external id = "sha256:" + the body's SHA-256) re-verify.
func TestReverifyPreUpgradeSentryHubSpotEvents(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	const sentrySecret, hubspotSecret = "sentry-client-secret", "hubspot-client-secret"
	b.sources = admin.Sources{
		"sentry":  {Type: "sentry", Secrets: []string{sentrySecret}},
		"hubspot": {Type: "hubspot", Secrets: []string{hubspotSecret}},
	}

	// A Sentry delivery as the previous version stored it: its id was the
	// Request-ID header (checked against 035c1cd's verifier: it returns
	// exactly this header value as the event id).
	sentryBody := []byte(`{"action":"created","installation":{"uuid":"7a485448-a9e2-4c85-8a3c-4f44175783c9"},"data":{"issue":{"id":"1170820242"}},"actor":{"type":"application","id":"sentry","name":"Sentry"}}`)
	m := hmac.New(sha256.New, []byte(sentrySecret))
	m.Write(sentryBody)
	const requestID = "3f0a9c1e-6d1b-4a8e-9c55-2b7f5e0d1a42"
	sentryHeaders := http.Header{"Sentry-Hook-Signature": {hex.EncodeToString(m.Sum(nil))}, "Request-Id": {requestID},
		"Sentry-Hook-Resource": {"issue"}, "Sentry-Hook-Timestamp": {"1700000000"}, "Content-Type": {"application/json"}}
	sentryID := b.insert(t, event{source: "sentry", id: requestID, eventType: "issue", body: sentryBody, headers: sentryHeaders})

	// A HubSpot delivery as the previous version stored it: the synthetic
	// body hash.
	h, hubspotBody, err := verify.SignTest(b.sources["hubspot"], "review-126", nil, "http://localhost/webhooks/hubspot", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(hubspotBody)
	hubspotID := b.insert(t, event{source: "hubspot", id: "sha256:" + hex.EncodeToString(sum[:]), eventType: "contact.propertyChange",
		body: hubspotBody, headers: h})

	for name, id := range map[string]int64{"sentry": sentryID, "hubspot": hubspotID} {
		rep, err := admin.Reverify(ctx, b.op, b.sources, admin.VerifyRequest{ID: id})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if rep.Failed != 0 {
			t.Errorf("a genuine %s event stored before the upgrade, unaltered: %+v; want verified "+
				"(re-verification applies the new id rule to an event the old rule named)", name, rep.Failures)
		}
	}
}
