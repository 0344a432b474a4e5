package verify

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net/http"
	"strings"
)

// Canonical spellings of Shopify's X-Shopify-* headers.
const (
	shopifySignatureHeader = "X-Shopify-Hmac-Sha256" // base64 HMAC-SHA256 of the body
	shopifyEventIDHeader   = "X-Shopify-Event-Id"
	shopifyWebhookIDHeader = "X-Shopify-Webhook-Id"
	shopifyTopicHeader     = "X-Shopify-Topic"
)

// shopifyVerifier implements Shopify's scheme: HMAC-SHA256 over the raw
// body, base64 encoded, keyed with the app's client secret (or the
// webhook signing secret shown in the admin). Shopify signs no timestamp
// (X-Shopify-Triggered-At is unsigned), so there is no window; dedupe on
// the event id stops replays.
type shopifyVerifier struct {
	keys  []*macKey
	ident *identity
}

func newShopify(cfg Config, ident *identity) *shopifyVerifier {
	v := &shopifyVerifier{ident: ident}
	v.keys = macKeys(cfg.Secrets)
	return v
}

func (v *shopifyVerifier) Verify(req *Request) (Result, error) {
	header := req.Header.Get(shopifySignatureHeader)
	if header == "" {
		return Result{}, fmt.Errorf("shopify: %w: no %s header", ErrSignatureMissing, shopifySignatureHeader)
	}
	sig, ok := decodeBase64MAC32(header)
	if !ok {
		return Result{}, fmt.Errorf("shopify: %w: %s is not the base64 of 32 bytes", ErrSignatureMalformed, shopifySignatureHeader)
	}
	index := -1
	for i, k := range v.keys {
		mac := k.sum(req.Body)
		if hmac.Equal(sig[:], mac[:]) {
			index = i
			break
		}
	}
	if index < 0 {
		return Result{}, fmt.Errorf("shopify: %w", ErrSignatureMismatch)
	}
	id, typ, err := v.ident.resolve("shopify", req, nil, func(needID bool) (string, string, error) {
		// X-Shopify-Event-Id is Shopify's documented dedupe key, the same
		// across retries. X-Shopify-Webhook-Id is the fallback for
		// deliveries without it; it names the delivery, and Shopify does
		// not document whether a retry keeps it.
		id := req.Header.Get(shopifyEventIDHeader)
		what := shopifyEventIDHeader + " header"
		if id == "" {
			id, what = req.Header.Get(shopifyWebhookIDHeader), shopifyWebhookIDHeader+" header"
		}
		if needID {
			if id == "" {
				return "", "", fmt.Errorf("shopify: %w: no %s or %s header", ErrMalformedPayload, shopifyEventIDHeader, shopifyWebhookIDHeader)
			}
			if err := checkEventID("shopify", what, id); err != nil {
				return "", "", err
			}
		}
		return id, req.Header.Get(shopifyTopicHeader), nil
	})
	if err != nil {
		return Result{}, err
	}
	return Result{EventID: id, EventType: typ, SecretIndex: index}, nil
}

// decodeBase64MAC32 decodes exactly the canonical padded standard base64
// spelling of 32 bytes (44 characters).
func decodeBase64MAC32(s string) (out [sha256.Size]byte, ok bool) {
	if len(s) != base64.StdEncoding.EncodedLen(sha256.Size) || strings.ContainsAny(s, "\r\n") {
		return out, false
	}
	var buf [sha256.Size + 1]byte
	n, err := standardSigEncoding.Decode(buf[:], []byte(s))
	if err != nil || n != sha256.Size {
		return out, false
	}
	copy(out[:], buf[:n])
	return out, true
}

// SignShopify returns the headers Shopify would send for body when signing
// with secret. Empty eventID or topic leave that header out; eventID is sent
// as both X-Shopify-Event-Id and X-Shopify-Webhook-Id.
func SignShopify(secret, eventID, topic string, body []byte) http.Header {
	mac := newMACKey([]byte(secret)).sum(body)
	h := make(http.Header, 4)
	h.Set(shopifySignatureHeader, base64.StdEncoding.EncodeToString(mac[:]))
	if eventID != "" {
		h.Set(shopifyEventIDHeader, eventID)
		h.Set(shopifyWebhookIDHeader, eventID)
	}
	if topic != "" {
		h.Set(shopifyTopicHeader, topic)
	}
	return h
}
