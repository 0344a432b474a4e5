//go:build !fuzzonly

package verify

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"strconv"
	"testing"
	"time"
)

// HubSpot signature v3, built from HubSpot's documented algorithm
// (https://developers.hubspot.com/docs/apps/developer-platform/build-apps/authentication/request-validation):
// base64(HMAC-SHA256(client secret, method + URI + body + timestamp)).
func hubSpotV3Headers(secret, method, uri string, body []byte, at time.Time) http.Header {
	ts := strconv.FormatInt(at.UnixMilli(), 10)
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(method + uri))
	m.Write(body)
	m.Write([]byte(ts))
	return http.Header{
		"X-Hubspot-Signature-V3":      {base64.StdEncoding.EncodeToString(m.Sum(nil))},
		"X-Hubspot-Request-Timestamp": {ts},
		"Content-Type":                {"application/json"},
	}
}

// HubSpot's signed string joins URI and body with no separator, and the
// preset's id is the body's hash. So bytes of a captured delivery can be
// moved between the URI's query and the body without changing the signed
// string: each such request verifies, with a body HubSpot never sent and a
// new synthetic id, so it is stored again as a new, "verified" event
// (within the 5-minute window). HubSpot bodies are always a JSON array of
// events; the preset accepts any bytes.
func TestHubSpotResplitURIAndBody(t *testing.T) {
	t.Parallel()
	const secret = "hubspot-client-secret"
	v, err := New(Config{Type: "hubspot", Secrets: []string{secret}})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_700_000_000, 0)
	body := []byte(`[{"eventId":1745263710,"subscriptionId":2150032,"portalId":62515,"appId":1160452,"occurredAt":1699999999123,"subscriptionType":"contact.propertyChange","attemptNumber":0,"objectId":1246965,"changeFlag":"UPDATED"}]`)
	const target = "https://hooks.example.com/webhooks/hubspot?portalId=62515"
	h := hubSpotV3Headers(secret, "POST", target, body, now)

	genuine, err := v.Verify(&Request{Header: h, Body: body, URL: target, Method: "POST", Now: now})
	if err != nil {
		t.Fatalf("genuine HubSpot delivery refused: %v", err)
	}

	// The replay: the query's last byte moved to the front of the body,
	// the same headers.
	replayURL := target[:len(target)-1]
	replayBody := append([]byte(target[len(target)-1:]), body...)
	res, err := v.Verify(&Request{Header: h, Body: replayBody, URL: replayURL, Method: "POST", Now: now.Add(time.Minute)})
	if err == nil {
		t.Errorf("a captured HubSpot delivery re-split between query and body verified: body %q, event id %q "+
			"(genuine id %q), type %q: stored again as a new verified event with a body HubSpot never sent",
			replayBody[:12], res.EventID, genuine.EventID, res.EventType)
	}
}

// The sources whose signature covers the URL re-verify only from it: the
// admin's re-verification names them when public_url is missing.
func TestSignsURL(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want bool
	}{
		{Config{Type: "twilio"}, true},
		{Config{Type: "hubspot"}, true},
		{Config{Type: "square"}, true},
		{Config{Type: "hmac", HMAC: HMACConfig{SignedPayload: "{url}{body}"}}, true},
		{Config{Type: "hmac", HMAC: HMACConfig{SignedPayload: "{timestamp}.{body}"}}, false},
		{Config{Type: "stripe"}, false},
		{Config{Type: "x"}, false},
	} {
		if got := SignsURL(c.cfg); got != c.want {
			t.Errorf("SignsURL(%s %q) = %v, want %v", c.cfg.Type, c.cfg.HMAC.SignedPayload, got, c.want)
		}
	}
}
