package ingress_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/ingress"
	"github.com/inlet-dev/inlet/ingress/sources"
	"github.com/inlet-dev/inlet/ingress/verify"
	"github.com/inlet-dev/inlet/internal/pgtest"
)

const svixReplaySecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// A Clerk (or Resend) delivery, captured, is replayed within the 5-minute
// window with its svix-* signature headers renamed webhook-* and a fresh
// svix-id each time. The verifier checks the webhook-* family (valid: same
// scheme, same key); the preset took the event id from the unsigned
// svix-id, so every replay was a new event, stored as verified and fanned
// out again (a review proved it). The id is now the signed one: each replay
// is a duplicate.
func TestSvixReplayUnderAnotherIDIsADuplicate(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"single", "group"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			dbURL := pgtest.NewDatabase(t)
			b := setupWith(t, dbURL, func(c *ingress.Config) {
				c.Sources = append(c.Sources, sources.Source{Name: "clerk", Config: verify.Config{Type: "clerk", Secrets: []string{svixReplaySecret}}})
				if kind == "group" {
					useGroupStore(t, dbURL)(c)
				}
			})
			body := []byte(`{"data":{"id":"user_29w83sxmDNGwOuEthce5gg56FcC","object":"user"},"object":"event","type":"user.created"}`)
			signed, err := verify.SignStandardWebhooks(svixReplaySecret, "msg_2Lh9KRb6pzN4ayGsm3pxJ3bVbs2", time.Now(), body)
			if err != nil {
				t.Fatal(err)
			}
			post := func(h http.Header) (int, string) {
				req, err := http.NewRequest(http.MethodPost, b.url+"/webhooks/clerk", strings.NewReader(string(body)))
				if err != nil {
					t.Fatal(err)
				}
				req.Header = h
				req.Header.Set("Content-Type", "application/json")
				code, answer, _ := do(t, req)
				return code, answer
			}
			// Svix's delivery.
			genuine := http.Header{
				"Svix-Id":        {signed.Get("Webhook-Id")},
				"Svix-Timestamp": {signed.Get("Webhook-Timestamp")},
				"Svix-Signature": {signed.Get("Webhook-Signature")},
			}
			if code, answer := post(genuine); code != http.StatusOK || !strings.Contains(answer, "stored") {
				t.Fatalf("genuine delivery: %d %s", code, answer)
			}
			// The attacker's replays.
			for _, forged := range []string{"msg_forged_1", "msg_forged_2"} {
				replay := http.Header{
					"Webhook-Id":        {signed.Get("Webhook-Id")},
					"Webhook-Timestamp": {signed.Get("Webhook-Timestamp")},
					"Webhook-Signature": {signed.Get("Webhook-Signature")},
					"Svix-Id":           {forged},
				}
				code, answer := post(replay)
				t.Logf("replay with svix-id %s: %d %s", forged, code, strings.TrimSpace(answer))
			}
			n := count(t, b.admin, `SELECT count(*) FROM webhook_ingress.events WHERE provider = 'clerk' AND signature_verified`)
			if n != 1 {
				t.Errorf("one signed Svix message (webhook-id %s) is stored as %d verified events, want 1",
					signed.Get("Webhook-Id"), n)
			}
		})
	}
}
