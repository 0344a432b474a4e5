package ingress_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/ingress/verify"
)

// Two distinct HubSpot events sharing subscriptionId and eventId are two
// stored events.
//
// Regression test (review helper-126; fixed: the text describes the
// behaviour before the fix; the id is now the batch's hash without its
// attemptNumbers). The hubspot preset's event id (ingress/verify/providers_timed.go,
// hubspotBatchID) is the hash of the batch's "subscriptionId:eventId" pairs
// only. HubSpot documents eventId as "The ID of the event that triggered
// this notification. This value is not guaranteed to be unique."
// (developers.hubspot.com, webhook payload fields), and subscriptions are
// set up per app, not per account: every HubSpot account (portalId) that
// installs the app is notified under the same subscriptionId. So two
// notifications that differ in everything that makes them distinct events
// (another portal, another object, another value, another time) but carry
// the same eventId get the same external_event_id: the second is answered
// 200 "duplicate" and never stored. HubSpot does not retry it: silent loss
// of a verified, acknowledged event (DESIGN: "no acknowledged event is
// lost"; a duplicate is a delivery of the same event).
//
// Expected: two distinct signed HubSpot deliveries (portal 62515/object
// 1246965 and portal 99001/object 5550001, same subscriptionId and
// eventId) are two stored events.
func TestHubSpotDistinctEventsSharingAnEventIDAreBothStored(t *testing.T) {
	t.Parallel()
	const secret = "hubspot-client-secret-review126"
	b := setupSource(t, "hubspot", verify.Config{Type: "hubspot", Secrets: []string{secret}})
	send := func(portal, object int64, value string, occurred int64) (int, string) {
		body := fmt.Appendf(nil, `[{"eventId":100,"subscriptionId":2150032,"portalId":%d,"appId":1160452,"occurredAt":%d,"subscriptionType":"contact.propertyChange","attemptNumber":0,"objectId":%d,"propertyName":"lifecyclestage","propertyValue":%q,"changeFlag":"UPDATED","changeSource":"CRM","sourceId":"userId:1234567"}]`,
			portal, occurred, object, value)
		return postHubSpot(t, b, secret, body)
	}
	now := time.Now().UnixMilli()
	if code, answer := send(62515, 1246965, "customer", now-2000); code != http.StatusOK {
		t.Fatalf("portal 62515's event: %d %s", code, answer)
	}
	code, answer := send(99001, 5550001, "lead", now-1000)
	n := storedOf(t, b, "hubspot")
	if n != 2 {
		t.Errorf("two distinct HubSpot events (other portal, object, value and time; same subscriptionId and eventId, which HubSpot "+
			"does not guarantee unique): %d stored, want 2; the second was answered %d %s", n, code, answer)
	}
}
