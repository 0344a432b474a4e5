package ingress_test

import (
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

// setupSource is an ingress on a database of its own that also takes source
// name, configured as cfg.
func setupSource(t *testing.T, name string, cfg verify.Config) *testBundle {
	t.Helper()
	return setupWith(t, pgtest.NewDatabase(t), func(c *ingress.Config) {
		c.Sources = append(c.Sources, sources.Source{Name: name, Config: cfg})
	})
}

// storedOf counts the events of provider b stored.
func storedOf(t *testing.T, b *testBundle, provider string) int {
	t.Helper()
	return count(t, b.admin, `SELECT count(*) FROM webhook_ingress.events WHERE provider = $1`, provider)
}

// postHubSpot posts body to b's hubspot source as HubSpot does: signature v3,
// base64 HMAC-SHA256(client secret, method + URL + body + timestamp), a fresh
// timestamp (ms) per delivery.
func postHubSpot(t *testing.T, b *testBundle, secret string, body []byte) (int, string) {
	t.Helper()
	const target = "/webhooks/hubspot"
	ts := strconv.FormatInt(time.Now().UnixMilli(), 10)
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte("POST" + b.url + target))
	m.Write(body)
	m.Write([]byte(ts))
	h := http.Header{
		"X-HubSpot-Signature-v3":      {base64.StdEncoding.EncodeToString(m.Sum(nil))},
		"X-HubSpot-Request-Timestamp": {ts},
		"Content-Type":                {"application/json"},
		"User-Agent":                  {"HubSpot Connect 2.0 (http://dev.hubspot.com/) - WebhooksExecutorDaemon-executor"},
	}
	return rawPost(t, b.url, target, h, body)
}
