// Package verify checks that an incoming webhook was really sent by the
// provider it claims to come from.
//
// Ingress builds one [Verifier] per configured source with [New] and calls it
// on every request before anything is stored: the signature is checked over
// the exact raw body bytes as received, never over a re-encoded body, and an
// event that fails verification never reaches PostgreSQL. On success the
// [Result] carries the event id (the dedupe key, together with the source
// name), the event type, and which of the configured secrets matched, so
// operators can tell when a rotated-out secret is no longer in use.
//
// Supported schemes (Config.Type), one file each:
//
//   - stripe: Stripe-Signature "t=…,v1=…", HMAC-SHA256 over "{t}.{body}",
//     hex; the whole whsec_ string is the key.
//   - github: X-Hub-Signature-256 "sha256=…", HMAC-SHA256 over the body,
//     hex. The SHA-1 X-Hub-Signature header is never used.
//   - gitlab: X-Gitlab-Token, the secret token itself, compared in constant
//     time. Nothing is signed.
//   - shopify: X-Shopify-Hmac-Sha256, HMAC-SHA256 over the body, base64.
//   - slack: X-Slack-Signature "v0=…" and X-Slack-Request-Timestamp,
//     HMAC-SHA256 over "v0:{timestamp}:{body}", hex.
//   - paddle: Paddle-Signature "ts=…;h1=…", HMAC-SHA256 over "{ts}:{body}",
//     hex; several h1 while Paddle rotates a secret.
//   - standard-webhooks (alias svix): webhook-* or svix-* headers over
//     "{id}.{timestamp}.{body}": v1 is HMAC-SHA256, base64, keyed with a
//     whsec_ secret; v1a is Ed25519, base64, checked with a whpk_ public key.
//     A source may list both kinds of key.
//   - twilio: X-Twilio-Signature, HMAC-SHA1, base64, over the URL Twilio
//     requested plus the sorted form parameters (name+value, every value of
//     a repeated name, sorted), or over the URL alone for JSON webhooks,
//     whose URL carries bodySHA256, the hex SHA-256 of the body. Behind a
//     proxy set Config.PublicURL.
//   - hmac: any other provider's HMAC, described by [HMACConfig]: header,
//     algorithm (sha1, sha256, sha512), hex or base64, prefix, optional
//     timestamp header and signed-payload template.
//
// Provider presets ([Presets]) are data over these schemes and three that
// only presets use: Ed25519 (discord) and ECDSA P-256 (sendgrid), whose
// secrets are the provider's public keys, so that a test request is signed
// with a private key instead ([SignTestKey], [HandshakeTestKey],
// [UsesPublicKeys]); and a token compare that signs nothing (okta's
// Authorization header, stored as its SHA-256 like GitLab's token;
// microsoft-graph's clientState in every notification of the body). A
// preset is one entry in providers_*.go: its scheme's parameters, where
// the provider keeps the event id, type and time, its handshakes, and a
// sample event; [ProviderDocs] documents every type from the same data.
//
// # Handshakes
//
// Some providers check the endpoint before or while they send events
// (Slack's url_verification, Meta's hub.challenge, X's CRC, Zoom's
// endpoint.url_validation, Twitch's callback verification, Discord's PING,
// Dropbox's and Microsoft Graph's challenges, Okta's verification,
// WooCommerce's ping). A verifier returns those as [Result.Handshake]: the
// answer to send, never an event to store. Where the provider signs the
// handshake it is checked like an event first; a verify token (Meta) is
// compared in constant time; a refused handshake fails with the same
// sentinel errors as a bad signature. [AnswersGET] tells which sources
// take GET requests at all, and [HandshakeTest] builds a provider's
// handshake for `inlet send --handshake`.
//
// # Event identity
//
// Each scheme has a default event id and type, below. Config.EventIDHeader
// or Config.EventIDJSON (a dotted path into the body), and
// Config.EventTypeHeader or Config.EventTypeJSON, replace them per source.
// Where neither the scheme nor the configuration gives an id, the id is
// synthetic: "sha256:" followed by the hex SHA-256 of the raw body, so a
// provider's retry of the same bytes is a duplicate and any other body a
// new event.
//
//	type              id                                        type
//	stripe            body id (required)                        body type
//	github            X-GitHub-Delivery (required)              X-GitHub-Event
//	gitlab            Idempotency-Key, else X-Gitlab-Event-UUID
//	                  with the body's digest, else synthetic  X-Gitlab-Event
//	shopify           X-Shopify-Event-Id, else                  X-Shopify-Topic
//	                  X-Shopify-Webhook-Id (one required)
//	slack             body event_id (Events API), else          event.type of an event_callback,
//	                  synthetic (url_verification, slash        else body type; interactivity:
//	                  commands, interactivity)                  payload type; slash command: command
//	paddle            body event_id (required)                  body event_type
//	standard-webhooks webhook-id / svix-id (signed)             body type, if JSON
//	twilio            I-Twilio-Idempotency-Token, else          MessageStatus, SmsStatus or
//	                  synthetic                                 CallStatus form parameter
//	hmac              synthetic                                 none
//
// Twilio's MessageSid and CallSid are deliberately not the default id:
// every status callback of one message or call repeats them, so deduping
// on them would keep "sent" and drop "delivered". A source that receives
// only one webhook per message can still choose it with
// `event_id_json: MessageSid` (for form bodies the path names a form
// field).
//
// An id header is not covered by the signature except in Standard
// Webhooks: a captured request replayed with a fresh id header verifies,
// and only the consumers' idempotency catches it. Body ids and synthetic
// ids are signed.
//
// # Rotation, clock skew, re-verification
//
// Every verifier accepts several secrets so a secret can be rotated without
// dropping events, compares MACs in constant time, and reports the index of
// the secret that matched in [Result.SecretIndex]. Schemes that sign a
// timestamp (stripe, standard-webhooks, slack, paddle, hmac with a
// timestamp header, the presets that sign one) bound its skew in both directions by Config.Tolerance
// and report [ErrTimestampOutsideTolerance], not [ErrSignatureMismatch],
// for an authentic but stale or future request. [Reverify] re-checks a
// stored event from its stored headers and raw body with the window off
// ([Request.IgnoreTolerance]): the signature is still checked, the age is
// not. It is what `inlet events verify` uses.
//
// Failures wrap one of the sentinel errors ([ErrSignatureMissing],
// [ErrSignatureMalformed], [ErrSignatureMismatch],
// [ErrTimestampOutsideTolerance], [ErrMalformedPayload]); callers branch with
// [errors.Is] and label logs and metrics with [Reason]. Error text never
// contains body bytes, header values or secrets, so it is safe to log.
//
// The signers ([SignStripe], [SignGitHub], [SignGitLab], [SignShopify],
// [SignSlack], [SignPaddle], [SignStandardWebhooks],
// [SignStandardWebhooksEd25519], [SignTwilio], [SignTwilioJSON],
// [SignHMAC]) produce the requests each provider sends; [SignTest] builds a
// complete accepted request for a source's configuration, for the
// `inlet send` dev command and for end-to-end tests.
package verify
