package verify

import (
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"
)

const (
	shopifySecret    = "shpss_5f7a2b1c9d8e3f4a6b0c1d2e"
	shopifyOldSecret = "shpss_old_000000000000000000"
	shopifyEventID   = "98880550-7158-44d4-b7cd-2c97c8a091b5"
	shopifyWebhookID = "b54557e4-bdd9-4b37-8a5f-bf7d70bcd043"
)

var shopifyBody = []byte(`{"id":820982911946154508,"email":"jon@example.com","closed_at":null,"total_price":"598.94","currency":"USD"}`)

// shopifyOracle is the documented signature, computed independently of
// the package: base64(HMAC-SHA256(secret, raw body)). Shopify ships no Go
// SDK to use as the oracle.
func shopifyOracle(secret string, body []byte) string {
	return base64.StdEncoding.EncodeToString(hmacOf(sha256.New, secret, string(body)))
}

func shopifyHeaders(sig string, kv ...string) http.Header {
	h := http.Header{}
	if sig != "" {
		h.Set("X-Shopify-Hmac-Sha256", sig)
	}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Set(kv[i], kv[i+1])
	}
	return h
}

func TestShopifyVerify(t *testing.T) {
	t.Parallel()
	valid := shopifyOracle(shopifySecret, shopifyBody)
	full := func(sig string) http.Header {
		return shopifyHeaders(sig, "X-Shopify-Event-Id", shopifyEventID, "X-Shopify-Webhook-Id", shopifyWebhookID,
			"X-Shopify-Topic", "orders/create", "X-Shopify-Triggered-At", "2023-11-14T22:13:20Z")
	}
	ok := Result{EventID: shopifyEventID, EventType: "orders/create"}
	runVerifyCases(t, Config{Type: "shopify", Secrets: []string{shopifySecret}}, shopifyBody, []verifyCase{
		{name: "valid", header: full(valid), wantRes: ok},
		{name: "our signer", header: SignShopify(shopifySecret, shopifyEventID, "orders/create", shopifyBody), wantRes: ok},
		{name: "webhook id when no event id", header: shopifyHeaders(valid, "X-Shopify-Webhook-Id", shopifyWebhookID, "X-Shopify-Topic", "orders/create"), wantRes: Result{EventID: shopifyWebhookID, EventType: "orders/create"}},
		{name: "no topic", header: shopifyHeaders(valid, "X-Shopify-Event-Id", shopifyEventID), wantRes: Result{EventID: shopifyEventID}},
		{name: "no timestamp window", header: full(valid), now: testNow.Add(10 * 365 * 24 * time.Hour), wantRes: ok},
		{name: "rotation new secret", secrets: []string{shopifyOldSecret, shopifySecret}, header: full(valid), wantRes: Result{EventID: shopifyEventID, EventType: "orders/create", SecretIndex: 1}},
		{name: "rotation old secret", secrets: []string{shopifyOldSecret, shopifySecret}, header: full(shopifyOracle(shopifyOldSecret, shopifyBody)), wantRes: ok},

		{name: "body byte changed", header: full(valid), body: []byte(strings.Replace(string(shopifyBody), "598.94", "598.95", 1)), wantErr: ErrSignatureMismatch},
		{name: "body re-encoded", header: full(valid), body: []byte(strings.ReplaceAll(string(shopifyBody), ",", ", ")), wantErr: ErrSignatureMismatch},
		{name: "one base64 char changed", header: full(changeBase64At(valid, 7)), wantErr: ErrSignatureMismatch},
		{name: "wrong secret", secrets: []string{shopifyOldSecret}, header: full(valid), wantErr: ErrSignatureMismatch},
		{name: "hex instead of base64", header: full(strings.Repeat("ab", 32)), wantErr: ErrSignatureMalformed},
		{name: "unpadded", header: full(strings.TrimSuffix(valid, "=")), wantErr: ErrSignatureMalformed},
		{name: "not base64", header: full(strings.Repeat("*", 43) + "="), wantErr: ErrSignatureMalformed},
		{name: "no signature", header: full(""), wantErr: ErrSignatureMissing},
		{name: "nil header", header: nil, wantErr: ErrSignatureMissing},
		{name: "no id headers", header: shopifyHeaders(valid, "X-Shopify-Topic", "orders/create"), wantErr: ErrMalformedPayload},
		{name: "mismatch before missing id", secrets: []string{shopifyOldSecret}, header: shopifyHeaders(valid), wantErr: ErrSignatureMismatch},
		{name: "event id not UTF-8", header: shopifyHeaders(valid, "X-Shopify-Event-Id", "\xff\xfe\xfd-id"), wantErr: ErrMalformedPayload},
	})
}

// shopifyReallySigned is the fuzz oracle: the header is exactly the
// base64 HMAC of the body.
func shopifyReallySigned(secret, sig string, body []byte) bool {
	return sig == shopifyOracle(secret, body)
}

func FuzzShopify(f *testing.F) {
	f.Add(shopifyOracle(shopifySecret, shopifyBody), shopifyEventID, shopifyBody, uint(0))
	f.Add(strings.Repeat("A", 43)+"=", "", []byte{}, uint(2))
	f.Add("AAAA\nAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=", "x", []byte("{"), uint(1<<12))

	secrets := []string{shopifyOldSecret, shopifySecret}
	v := mustNew(f, Config{Type: "shopify", Secrets: secrets})
	f.Fuzz(func(t *testing.T, sig, id string, body []byte, flip uint) {
		req := &Request{Header: shopifyHeaders(sig, "X-Shopify-Webhook-Id", id), Body: body}
		res, err := v.Verify(req)
		if err == nil {
			if !shopifyReallySigned(secrets[res.SecretIndex], sig, body) || res.EventID != id {
				t.Fatalf("accepted %q id %q for body %q: not genuine", sig, id, body)
			}
		} else {
			if Reason(err) == "unknown" {
				t.Fatalf("error without sentinel: %v", err)
			}
			checkErrorSafe(t, err, secrets, req)
		}
		h := SignShopify(shopifySecret, "evt-1", "orders/paid", body)
		if res, err := v.Verify(&Request{Header: h, Body: body}); err != nil || res.SecretIndex != 1 {
			t.Fatalf("genuine: %+v, %v", res, err)
		}
		if len(body) > 0 {
			if _, err := v.Verify(&Request{Header: h, Body: flipBit(body, flip)}); !errors.Is(err, ErrSignatureMismatch) {
				t.Fatalf("flipped body: %v", err)
			}
		}
	})
}
