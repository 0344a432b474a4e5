//go:build !fuzzonly

package verify

import (
	"net/http"
	"testing"
	"time"
)

// The clerk and resend presets took the event id from the svix-id header,
// but the Standard Webhooks check prefers the webhook-* family when a
// webhook-signature is present. A request whose webhook-id / -timestamp /
// -signature are valid (Svix's own headers renamed: same scheme, same key)
// and which carried any svix-id verified, and was stored under the unsigned
// svix-id: a captured delivery could be replayed within the window under as
// many ids as the attacker liked (a review proved it). The id is now the
// one the signature covers, for the presets and for a standard-webhooks
// source that names either id header itself.
func TestStandardWebhooksIDIsTheSignedOne(t *testing.T) {
	t.Parallel()
	for name, cfg := range map[string]Config{
		"clerk":                 {Type: "clerk", Secrets: []string{standardSecret}},
		"resend":                {Type: "resend", Secrets: []string{standardSecret}},
		"svix-id configured":    {Type: "standard-webhooks", Secrets: []string{standardSecret}, EventIDHeader: "svix-id"},
		"webhook-id configured": {Type: "standard-webhooks", Secrets: []string{standardSecret}, EventIDHeader: "Webhook-Id"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			body := []byte(`{"type":"user.created","timestamp":1654012591835,"created_at":"2026-12-06T00:00:00.000Z"}`)
			v := mustNew(t, cfg)

			// What Svix sent: svix-* headers, signed id msg_real.
			signed, err := SignStandardWebhooks(standardSecret, "msg_real", testNow, body)
			if err != nil {
				t.Fatal(err)
			}
			genuine := http.Header{
				"Svix-Id":        {signed.Get("Webhook-Id")},
				"Svix-Timestamp": {signed.Get("Webhook-Timestamp")},
				"Svix-Signature": {signed.Get("Webhook-Signature")},
			}
			res, err := v.Verify(&Request{Header: genuine, Body: body, Now: testNow})
			if err != nil || res.EventID != "msg_real" {
				t.Fatalf("genuine delivery: %+v, %v", res, err)
			}

			// The replay: the same signature under webhook-* names, plus a
			// forged svix-id.
			replay := http.Header{
				"Webhook-Id":        {"msg_real"},
				"Webhook-Timestamp": genuine["Svix-Timestamp"],
				"Webhook-Signature": genuine["Svix-Signature"],
				"Svix-Id":           {"msg_forged_1"},
			}
			res, err = v.Verify(&Request{Header: replay, Body: body, Now: testNow.Add(time.Minute)})
			if err == nil && res.EventID != "msg_real" {
				t.Errorf("replayed delivery verified with the unsigned id %q (signed id msg_real): "+
					"a replay within the window is stored again under any id", res.EventID)
			}
		})
	}
}

// A Slack source that sets event_id_json (or event_id_header) could never
// pass Slack's signed url_verification: the custom id was resolved (and
// required) before the handshake was recognised, so the challenge got 400
// malformed_payload (a review proved it).
func TestSlackURLVerificationWithCustomID(t *testing.T) {
	t.Parallel()
	const secret = "slack-review-secret"
	body := []byte(`{"token":"Jhj5dZrVaK7ZwHHjRyZWjbDl","challenge":"3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P","type":"url_verification"}`)
	for _, cfg := range []Config{
		{Type: "slack", Secrets: []string{secret}, EventIDJSON: "event_id"},
		{Type: "slack", Secrets: []string{secret}, EventIDHeader: "X-Slack-Retry-Id"},
	} {
		v := mustNew(t, cfg)
		res, err := v.Verify(&Request{Header: SignSlack(secret, testNow, body), Body: body, Now: testNow})
		if err != nil || res.Handshake == nil {
			t.Errorf("event_id_json=%q event_id_header=%q: signed url_verification not answered: %+v, %v",
				cfg.EventIDJSON, cfg.EventIDHeader, res, err)
		}
	}
}
