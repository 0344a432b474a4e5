package verify

import (
	"fmt"
	"net/http"
	"time"
)

// keyProviders are the presets over the other schemes: public-key
// signatures (Ed25519, ECDSA), token compare, and Standard Webhooks.
var keyProviders = []*preset{
	{
		// Discord's interactions endpoint. The application's public key
		// (hex, from the Developer Portal) goes in secrets. Discord also
		// sends deliberately bad signatures to check the endpoint refuses
		// them. The timestamp is signed; Discord documents no window, so
		// the default 5 minutes applies (it sends each interaction once and
		// wants the answer within 3 seconds). Ingress answers a stored
		// interaction with a deferred response (discordReply), which the
		// handler completes later with a follow-up through the
		// interaction's token. Discord's
		// Webhook Events (a different endpoint, whose events have type 1)
		// are not this preset's.
		name:   "discord",
		scheme: schemeEd25519,
		keySig: keySigConfig{header: "X-Signature-Ed25519", encoding: "hex",
			timestampHeader: "X-Signature-Timestamp", signedPayload: "{timestamp}{body}"},
		// The interaction id (a snowflake) is unique per interaction. The
		// type is the interaction type, a number (2 application command, 3
		// message component, 4 autocomplete, 5 modal submit): always
		// there, unlike data.name (commands only).
		idJSON:         "id",
		typeJSON:       "type",
		occurredHeader: "X-Signature-Timestamp",
		handshakes:     []handshakeKind{hsDiscordPing()},
		event:          discordReply,
		sample: func(id string, _ time.Time) (http.Header, []byte) {
			return nil, fmt.Appendf(nil, `{"app_permissions":"442368","application_id":"1181112222333344440","channel_id":"1181112222333344442","data":{"id":"1181112222333344441","name":"hello","type":1},"entitlements":[],"guild_id":"1181112222333344443","id":%q,"locale":"en-US","member":{"user":{"id":"1181112222333344444","username":"tester"}},"token":"aW50ZXJhY3Rpb24tdGVzdC10b2tlbg","type":2,"version":1}`, id)
		},
		doc: PresetDoc{
			Provider:  "Discord (interactions endpoint)",
			Headers:   "X-Signature-Ed25519, X-Signature-Timestamp",
			Signed:    "Ed25519(timestamp + body), hex; secrets are the application's public keys (hex)",
			ID:        "body id",
			Type:      "body type (the interaction type, a number)",
			Occurred:  "X-Signature-Timestamp",
			Handshake: "signed PING (type 1) answered {\"type\":1}; each stored interaction is answered with a deferred response (type 5, 6 for components), to be completed with a follow-up through its token",
			Source:    "type: discord\nsecrets: [\"${DISCORD_PUBLIC_KEY}\"]   # the application's public key, hex",
			Docs:      "https://discord.com/developers/docs/interactions/overview#setting-up-an-endpoint-validating-security-request-headers",
		},
	},
	{
		// SendGrid's signed Event Webhook. The verification key (base64
		// DER, from Mail Settings > Event Webhook) goes in secrets.
		name:   "sendgrid",
		scheme: schemeECDSA,
		keySig: keySigConfig{header: "X-Twilio-Email-Event-Webhook-Signature", encoding: "base64",
			timestampHeader: "X-Twilio-Email-Event-Webhook-Timestamp", signedPayload: "{timestamp}{body}"},
		// The body is a batch of events of any types: no single id or
		// type describes it. sg_event_id is not stable across SendGrid's
		// retries and the first event's would wrongly make a different
		// batch a duplicate, so the id is the synthetic body hash and the
		// type is "" (handlers read the array).
		occurredJSON: "0.timestamp",
		sample: func(id string, now time.Time) (http.Header, []byte) {
			return nil, fmt.Appendf(nil, `[{"email":"jon@example.com","event":"delivered","ip":"168.1.1.1","response":"250 OK","sg_event_id":%q,"sg_message_id":"14c5d75ce93.dfd.64b469.filter0001.16648.5515E0B88.0","smtp-id":"<14c5d75ce93.dfd.64b469@ismtpd-555>","timestamp":%d,"tls":1}]`+"\r\n", id, now.Unix())
		},
		doc: PresetDoc{
			Provider: "SendGrid (signed Event Webhook)",
			Headers:  "X-Twilio-Email-Event-Webhook-Signature, X-Twilio-Email-Event-Webhook-Timestamp",
			Signed:   "ECDSA P-256 SHA-256(timestamp + body), ASN.1 DER base64; secrets are verification keys (base64 DER)",
			ID:       "none (synthetic body hash: a batch of events)",
			Type:     "none (a batch mixes types)",
			Occurred: "body [0].timestamp",
			Source:   "type: sendgrid\nsecrets: [\"${SENDGRID_WEBHOOK_VERIFICATION_KEY}\"]   # base64, from the Event Webhook settings",
			Docs:     "https://www.twilio.com/docs/sendgrid/for-developers/tracking-events/getting-started-event-webhook-security-features",
		},
	},
	{
		// Okta event hooks sign nothing: the Authorization header carries
		// the secret value configured with the hook, compared in constant
		// time and stored as its SHA-256.
		// eventId names the delivery; Okta amalgamates events that occur
		// close together into one (data.events), and its documentation
		// dedupes single events by data.events[].uuid, which handlers can
		// do. The envelope's eventType is always com.okta.event_hook: the
		// type is the first event's.
		name:       "okta",
		scheme:     schemeToken,
		token:      tokenConfig{header: "Authorization"},
		idJSON:     "eventId",
		typeJSON:   "data.events.0.eventType",
		handshakes: []handshakeKind{hsOkta()},
		// eventTime is when Okta sent the hook; the events' own times are
		// data.events[].published.
		occurredJSON: "eventTime",
		sample: func(id string, now time.Time) (http.Header, []byte) {
			ts := now.UTC().Format("2006-01-02T15:04:05.000Z")
			return nil, fmt.Appendf(nil, `{"eventType":"com.okta.event_hook","eventTypeVersion":"1.0","cloudEventsVersion":"0.1","source":"https://example.okta.com/api/v1/eventHooks/who8tsqyrhCdmetzx135","eventId":%q,"data":{"events":[{"uuid":"14a42b00-74e5-11ee-8a5a-69d62fcd0f8b","published":%q,"eventType":"user.lifecycle.activate","version":"0","displayMessage":"Activate Okta user","severity":"INFO","actor":{"id":"00u7xut94qEWYx5ss1e5","type":"User","alternateId":"admin@example.com","displayName":"Admin"},"outcome":{"result":"SUCCESS"},"target":[{"id":"00ufh433fil4JtjEw4x7","type":"User","alternateId":"jon@example.com","displayName":"Jon"}]}]},"eventTime":%q,"contentType":"application/json"}`, id, ts, ts)
		},
		doc: PresetDoc{
			Provider:  "Okta (event hooks)",
			Headers:   "Authorization",
			Signed:    "nothing: the Authorization value configured with the hook, compared in constant time (stored as its SHA-256)",
			ID:        "body eventId",
			Type:      "body data.events[0].eventType",
			Occurred:  "body eventTime",
			Handshake: "GET X-Okta-Verification-Challenge answered {\"verification\": …}, with the right Authorization only",
			Source:    "type: okta\nsecrets: [\"${OKTA_EVENT_HOOK_AUTHORIZATION}\"]   # the hook's Authorization header value",
			Docs:      "https://developer.okta.com/docs/concepts/event-hooks/",
		},
	},
	{
		// Microsoft Graph change notifications sign nothing either: every
		// notification in value[] carries the clientState given when the
		// subscription was created, which must be one of the secrets.
		// Rich notifications (includeResourceData: encrypted content,
		// validationTokens JWTs) are stored as they come but those are not
		// checked: the clientState is.
		name:        "microsoft-graph",
		perDelivery: true,
		scheme:      schemeToken,
		token:       tokenConfig{items: "value", field: "clientState"},
		typeJSON:    "value.0.changeType",
		handshakes:  []handshakeKind{hsQueryEcho("validation_token", http.MethodPost, "validationToken")},
		sample: func(id string, now time.Time) (http.Header, []byte) {
			exp := now.Add(48 * time.Hour).UTC().Format("2006-01-02T15:04:05.0000000Z")
			return nil, fmt.Appendf(nil, `{"value":[{"subscriptionId":"7f105c7d-2dc5-4530-97cd-4e7ae6534c07","subscriptionExpirationDateTime":%q,"changeType":"created","resource":"Users/5c8a8b24-3b4c-4a3e-9d1e-6b0f9c3c2a11/Messages/%s","resourceData":{"@odata.type":"#Microsoft.Graph.Message","@odata.id":"Users/5c8a8b24-3b4c-4a3e-9d1e-6b0f9c3c2a11/Messages/%s","@odata.etag":"W/\"CQAAABYAAACQ2fKdhq8oSKEDSVrdi3lRAAAH2n0x\"","id":%q},"clientState":"","tenantId":"84bd8158-6d4d-4958-8b9f-9d6445542f95"}]}`, exp, id, id, id)
		},
		doc: PresetDoc{
			Provider:  "Microsoft Graph (change notifications)",
			Headers:   "none (clientState in the body)",
			Signed:    "nothing: every value[].clientState must equal a secret (constant time); rich notifications' validationTokens JWTs are not checked",
			ID:        "none: each delivery gets its own (delivery:<random>); identical bodies are distinct events",
			Type:      "body value[0].changeType",
			Occurred:  "none",
			Handshake: "POST ?validationToken= echoed as text/plain",
			Source:    "type: microsoft-graph\nsecrets: [\"${GRAPH_CLIENT_STATE}\"]   # the subscription's clientState",
			Docs:      "https://learn.microsoft.com/en-us/graph/change-notifications-delivery-webhooks",
		},
	},
	{
		// Clerk sends its webhooks through Svix (svix-* headers, whsec_
		// secret).
		name:         "clerk",
		scheme:       typeStandardWebhooks,
		idHeader:     "svix-id",
		typeJSON:     "type",
		occurredJSON: "timestamp", // Unix milliseconds
		sample: func(string, time.Time) (http.Header, []byte) {
			return nil, []byte(`{"data":{"birthday":"","created_at":1654012591514,"email_addresses":[{"email_address":"example@example.org","id":"idn_29w83yL7CwVlJXylYLxcslromF1","object":"email_address","verification":{"status":"verified","strategy":"ticket"}}],"first_name":"Example","id":"user_29w83sxmDNGwOuEthce5gg56FcC","last_name":"Example","object":"user","primary_email_address_id":"idn_29w83yL7CwVlJXylYLxcslromF1","updated_at":1654012591835},"event_attributes":{"http_request":{"client_ip":"0.0.0.0","user_agent":"Mozilla/5.0"}},"instance_id":"ins_123","object":"event","timestamp":1654012591835,"type":"user.created"}`)
		},
		doc: PresetDoc{
			Provider: "Clerk",
			Headers:  "svix-id, svix-timestamp, svix-signature",
			Signed:   "Standard Webhooks (Svix): v1, base64 HMAC-SHA256(whsec_ key, id.timestamp.body)",
			ID:       "svix-id",
			Type:     "body type",
			Occurred: "body timestamp (Unix ms)",
			Source:   "type: clerk\nsecrets: [\"${CLERK_WEBHOOK_SIGNING_SECRET}\"]   # whsec_…",
			Docs:     "https://clerk.com/docs/guides/development/webhooks/overview",
		},
	},
	{
		// Resend sends its webhooks through Svix too.
		name:         "resend",
		scheme:       typeStandardWebhooks,
		idHeader:     "svix-id",
		typeJSON:     "type",
		occurredJSON: "created_at",
		sample: func(_ string, now time.Time) (http.Header, []byte) {
			ts := now.UTC().Format("2006-01-02T15:04:05.000Z")
			return nil, fmt.Appendf(nil, `{"type":"email.sent","created_at":%q,"data":{"created_at":%q,"email_id":"56761188-7520-42d8-8898-ff6fc54ce618","from":"Acme <onboarding@resend.dev>","to":["delivered@resend.dev"],"subject":"Sending this example"}}`, ts, ts)
		},
		doc: PresetDoc{
			Provider: "Resend",
			Headers:  "svix-id, svix-timestamp, svix-signature",
			Signed:   "Standard Webhooks (Svix): v1, base64 HMAC-SHA256(whsec_ key, id.timestamp.body)",
			ID:       "svix-id",
			Type:     "body type",
			Occurred: "body created_at",
			Source:   "type: resend\nsecrets: [\"${RESEND_WEBHOOK_SECRET}\"]   # whsec_…",
			Docs:     "https://resend.com/docs/webhooks/verify-webhooks-requests",
		},
	},
}

// discordReply gives a stored Discord interaction the answer Discord needs
// within 3 seconds, or it shows the user "This interaction failed": a
// deferred response (type 5 for commands and modal submits, 6 for message
// components; an autocomplete gets no choices, type 8), which the handler
// completes later with a follow-up through the interaction's token.
func discordReply(req *Request, res Result, _ bool) (Result, error) {
	reply := map[string]any{"type": 5}
	switch typ, _ := lookupJSON(req.Body, []string{"type"}); typ {
	case "3": // message component
		reply = map[string]any{"type": 6}
	case "4": // autocomplete
		reply = map[string]any{"type": 8, "data": map[string]any{"choices": []any{}}}
	}
	res.Reply = jsonAnswer("interaction_deferred", reply)
	return res, nil
}
