package verify

import (
	"cmp"
	"slices"
)

// ProviderDoc is one row of the provider table (docs/providers.md, and a
// compact one in the README): a built-in scheme or a provider preset.
type ProviderDoc struct {
	// Type is the Config.Type that selects the provider.
	Type string
	// Kinds are the Handshake.Kind values its verifier answers (the kind
	// label of inlet_ingress_handshakes_total), none where the provider
	// sends no handshake.
	Kinds []string
	PresetDoc
}

// ProviderDocs returns the provider table: a row for each built-in scheme
// and each preset, sorted by type. The svix alias shares
// standard-webhooks' row.
func ProviderDocs() []ProviderDoc {
	docs := make([]ProviderDoc, 0, len(schemeDocs)+len(presets))
	for _, typ := range schemeTypes() {
		d := ProviderDoc{Type: typ, PresetDoc: schemeDocs[typ]}
		if typ == typeSlack {
			d.Kinds = []string{slackHandshake.kind, slackSSLCheck}
		}
		docs = append(docs, d)
	}
	for name, p := range presets {
		d := ProviderDoc{Type: name, PresetDoc: p.doc}
		for _, k := range p.handshakes {
			if !slices.Contains(d.Kinds, k.kind) {
				d.Kinds = append(d.Kinds, k.kind)
			}
		}
		docs = append(docs, d)
	}
	slices.SortFunc(docs, func(a, b ProviderDoc) int { return cmp.Compare(a.Type, b.Type) })
	return docs
}

// schemeDocs are the built-in schemes' rows, as the package documentation
// and each scheme's file describe them.
var schemeDocs = map[string]PresetDoc{
	typeGitHub: {
		Provider: "GitHub",
		Headers:  "X-Hub-Signature-256: sha256=…, X-GitHub-Delivery, X-GitHub-Event",
		Signed:   "raw body, HMAC-SHA256 hex (SHA-1 X-Hub-Signature never accepted)",
		ID:       "X-GitHub-Delivery (required)",
		Type:     "X-GitHub-Event",
		Occurred: "none",
		Source:   "type: github\nsecrets: [\"${GITHUB_WEBHOOK_SECRET}\"]",
		Docs:     "https://docs.github.com/en/webhooks/using-webhooks/validating-webhook-deliveries",
	},
	typeGitLab: {
		Provider: "GitLab",
		Headers:  "X-Gitlab-Token, Idempotency-Key, X-Gitlab-Event-UUID, X-Gitlab-Event",
		Signed:   "none: the token is compared in constant time, and stored only as its SHA-256",
		ID:       "Idempotency-Key (GitLab 17.4+), else X-Gitlab-Event-UUID/body digest (the UUID alone is shared by the hooks of one request), else synthetic",
		Type:     "X-Gitlab-Event",
		Occurred: "body object_attributes.updated_at, where present",
		Source:   "type: gitlab\nsecrets: [\"${GITLAB_WEBHOOK_TOKEN}\"]        # the webhook's secret token",
		Docs:     "https://docs.gitlab.com/user/project/integrations/webhooks/",
	},
	typeHMAC: {
		Provider: "Any HMAC sender",
		Headers:  "hmac.header (and hmac.timestamp_header, hmac.alt_headers)",
		Signed:   "the hmac.signed_payload template ({timestamp}, {body}, {url}, {method}, {header:Name}, {json:path}); sha1/sha256/sha512, hex/base64, optional prefix or key=value list",
		ID:       "synthetic, or event_id_header / event_id_json",
		Type:     "none, or event_type_header / event_type_json",
		Occurred: "none, or occurred_at_header / occurred_at_json",
		Source: "type: hmac\nsecrets: [\"${VENDOR_WEBHOOK_SECRET}\"]\ntolerance: 10m\nhmac:\n" +
			"  header: X-Vendor-Signature\n  algorithm: sha256          # sha1, sha256 or sha512\n" +
			"  encoding: hex              # hex or base64\n  prefix: \"sha256=\"\n" +
			"  timestamp_header: X-Vendor-Timestamp\n  signed_payload: \"{timestamp}.{body}\"\n" +
			"event_id_json: data.id\nevent_type_header: X-Vendor-Event",
		Docs: "https://webhooks.fyi/security/hmac",
	},
	typePaddle: {
		Provider: "Paddle Billing",
		Headers:  "Paddle-Signature: ts=…;h1=…[;h1=…]",
		Signed:   "{ts}:{body}, HMAC-SHA256 hex",
		ID:       "body event_id (required)",
		Type:     "body event_type",
		Occurred: "body occurred_at",
		Source:   "type: paddle\nsecrets: [\"${PADDLE_WEBHOOK_SECRET}\"]       # pdl_ntfset_…",
		Docs:     "https://developer.paddle.com/webhooks/signature-verification",
	},
	typeShopify: {
		Provider: "Shopify",
		Headers:  "X-Shopify-Hmac-Sha256, X-Shopify-Event-Id or X-Shopify-Webhook-Id, X-Shopify-Topic",
		Signed:   "raw body, HMAC-SHA256 base64",
		ID:       "X-Shopify-Event-Id, else X-Shopify-Webhook-Id",
		Type:     "X-Shopify-Topic",
		Occurred: "X-Shopify-Triggered-At (not signed)",
		Source:   "type: shopify\nsecrets: [\"${SHOPIFY_CLIENT_SECRET}\"]",
		Docs:     "https://shopify.dev/docs/apps/build/webhooks/subscribe/https#step-5-verify-the-webhook",
	},
	typeSlack: {
		Provider:  "Slack",
		Headers:   "X-Slack-Signature: v0=…, X-Slack-Request-Timestamp",
		Signed:    "v0:{ts}:{body}, HMAC-SHA256 hex",
		ID:        "body event_id, else synthetic",
		Type:      "event.type of an event_callback, else body type",
		Occurred:  "body event_time",
		Handshake: "signed POST url_verification: its challenge echoed; form POST ssl_check=1, signed or not as Slack sends it (a slash command's URL check): 200, empty",
		Source:    "type: slack\nsecrets: [\"${SLACK_SIGNING_SECRET}\"]",
		Docs:      "https://api.slack.com/authentication/verifying-requests-from-slack",
	},
	typeStandardWebhooks: {
		Provider: "Standard Webhooks / Svix (svix)",
		Headers:  "webhook-id, webhook-timestamp, webhook-signature (or svix-*)",
		Signed:   "{id}.{ts}.{body}: v1, HMAC-SHA256 base64 with whsec_ keys; v1a, Ed25519 with whpk_ public keys",
		ID:       "webhook-id",
		Type:     "body type",
		Occurred: "body timestamp, where present",
		Source:   "type: standard-webhooks                   # or svix\nsecrets: [\"${ACME_WEBHOOK_SECRET}\"]         # whsec_… (v1); whpk_… public keys (v1a) beside them",
		Docs:     "https://github.com/standard-webhooks/standard-webhooks/blob/main/spec/standard-webhooks.md",
	},
	typeStripe: {
		Provider: "Stripe",
		Headers:  "Stripe-Signature: t=…,v1=… (several v1 accepted)",
		Signed:   "{t}.{body}, HMAC-SHA256 hex, key = the whole whsec_…",
		ID:       "body id (required)",
		Type:     "body type",
		Occurred: "body created",
		Source:   "type: stripe\nsecrets: [\"${STRIPE_WEBHOOK_SECRET}\"]      # whsec_…\ntolerance: 5m",
		Docs:     "https://docs.stripe.com/webhooks#verify-manually",
	},
	typeTwilio: {
		Provider: "Twilio",
		Headers:  "X-Twilio-Signature (and I-Twilio-Idempotency-Token)",
		Signed:   "URL + sorted form name+value pairs, HMAC-SHA1 base64; JSON: URL with bodySHA256 = hex SHA-256 of the body",
		ID:       "I-Twilio-Idempotency-Token, else synthetic",
		Type:     "MessageStatus, SmsStatus or CallStatus",
		Occurred: "none",
		Source:   "type: twilio\nsecrets: [\"${TWILIO_AUTH_TOKEN}\"]\npublic_url: https://hooks.example.com/webhooks/twilio       # as configured in Twilio, no query",
		Docs:     "https://www.twilio.com/docs/usage/security#validating-requests",
	},
}
