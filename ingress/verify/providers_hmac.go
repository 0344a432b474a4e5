package verify

import (
	"fmt"
	"net/http"
	"time"
)

// bodyHMACProviders are the presets whose signature is an HMAC of the body
// alone (no timestamp): replay protection is the event id's dedupe.
var bodyHMACProviders = []*preset{
	{
		name:   "meta",
		scheme: typeHMAC,
		hmac:   HMACConfig{Header: "X-Hub-Signature-256", Prefix: "sha256=", Algorithm: "sha256", Encoding: "hex"},
		// Meta sends no event id: the synthetic body hash deduplicates its
		// retries.
		typeJSON:         "object",
		occurredJSON:     "entry.0.time",
		handshakes:       []handshakeKind{hsMeta()},
		needsVerifyToken: true,
		sample: func(id string, now time.Time) (http.Header, []byte) {
			return nil, fmt.Appendf(nil, `{"object":"whatsapp_business_account","entry":[{"id":"102290129340398","time":%d,"changes":[{"field":"messages","value":{"messaging_product":"whatsapp","metadata":{"display_phone_number":"15550783881","phone_number_id":"106540352242922"},"messages":[{"from":"16505551234","id":%q,"timestamp":"%d","type":"text","text":{"body":"hello"}}]}}]}]}`, now.Unix(), id, now.Unix())
		},
		doc: PresetDoc{
			Provider:  "Meta (Facebook, Instagram, WhatsApp Cloud API)",
			Headers:   "X-Hub-Signature-256",
			Signed:    "sha256= hex HMAC-SHA256(app secret, body)",
			ID:        "none (synthetic body hash)",
			Type:      "body object",
			Occurred:  "body entry[0].time",
			Handshake: "GET hub.mode=subscribe, hub.verify_token = verify_token, hub.challenge echoed",
			Source:    "type: meta\nsecrets: [\"${META_APP_SECRET}\"]\nverify_token: \"${META_VERIFY_TOKEN}\"",
			Docs:      "https://developers.facebook.com/docs/graph-api/webhooks/getting-started",
		},
	},
}
