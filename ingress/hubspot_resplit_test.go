package ingress_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/ingress"
	"github.com/inlet-dev/inlet/ingress/sources"
	"github.com/inlet-dev/inlet/ingress/verify"
	"github.com/inlet-dev/inlet/internal/pgtest"
)

// End to end: a HubSpot delivery captured once (target URL with a query, as
// HubSpot allows) is re-sent within the window with the query's last byte
// moved to the front of the body. HubSpot's v3 signed string (method + URI
// + body + timestamp) is unchanged and the preset's id is the body's hash:
// ingress stored a second "verified" event whose raw_body HubSpot never
// sent, until the preset refused bodies that are not a JSON array.
func TestHubSpotResplitStoredTwice(t *testing.T) {
	t.Parallel()
	const secret = "hubspot-client-secret"
	dbURL := pgtest.NewDatabase(t)
	b := setupWith(t, dbURL, func(c *ingress.Config) {
		c.Sources = append(c.Sources, sources.Source{Name: "hubspot", Config: verify.Config{Type: "hubspot", Secrets: []string{secret}}})
	})
	body := []byte(`[{"eventId":1745263710,"subscriptionId":2150032,"portalId":62515,"appId":1160452,"occurredAt":1699999999123,"subscriptionType":"contact.propertyChange","attemptNumber":0,"objectId":1246965,"changeFlag":"UPDATED"}]`)
	const target = "/webhooks/hubspot?portalId=62515"
	// HubSpot's documented v3 signature over the URL it called.
	ts := strconv.FormatInt(time.Now().UnixMilli(), 10)
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte("POST" + b.url + target))
	m.Write(body)
	m.Write([]byte(ts))
	h := http.Header{
		"X-HubSpot-Signature-v3":      {base64.StdEncoding.EncodeToString(m.Sum(nil))},
		"X-HubSpot-Request-Timestamp": {ts},
		"Content-Type":                {"application/json"},
	}
	if code, answer := rawPost(t, b.url, target, h, body); code != http.StatusOK {
		t.Fatalf("genuine delivery: %d %s", code, answer)
	}
	replayBody := append([]byte(target[len(target)-1:]), body...)
	code, answer := rawPost(t, b.url, target[:len(target)-1], h, replayBody)

	var n int
	if err := b.admin.QueryRow(context.Background(),
		`SELECT count(*) FROM webhook_ingress.events WHERE provider = 'hubspot' AND signature_verified`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Errorf("re-split replay answered %d %s; %d verified hubspot events stored, want 1 (the replay stored under a new id, with a body HubSpot never sent)", code, answer, n)
	}
}
