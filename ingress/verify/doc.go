// Package verify checks that an incoming webhook was really sent by the
// provider it claims to come from.
//
// Ingress builds one [Verifier] per configured source with [New] and calls it
// on every request before anything is stored: the signature is checked over
// the exact raw body bytes as received, never over a re-encoded body, and an
// event that fails verification never reaches PostgreSQL. On success the
// [Result] carries the provider's event id (the dedupe key, together with the
// source name), the event type, and which of the configured secrets matched,
// so operators can tell when a rotated-out secret is no longer in use.
//
// Supported schemes, one file each:
//
//   - stripe: Stripe-Signature, HMAC-SHA256 over "{t}.{body}", hex.
//   - github: X-Hub-Signature-256, HMAC-SHA256 over the body, hex. The SHA-1
//     X-Hub-Signature header is never used.
//   - standard-webhooks (alias svix): webhook-* or svix-* headers, HMAC-SHA256
//     over "{id}.{timestamp}.{body}", base64.
//
// Every verifier accepts several secrets so a secret can be rotated without
// dropping events, compares MACs in constant time, and bounds timestamp skew
// in both directions where the scheme signs a timestamp. Re-verifying a
// stored event sets [Request.IgnoreTolerance]: the signature is still
// checked, the age is not.
//
// Failures wrap one of the sentinel errors ([ErrSignatureMissing],
// [ErrSignatureMalformed], [ErrSignatureMismatch],
// [ErrTimestampOutsideTolerance], [ErrMalformedPayload]); callers branch with
// [errors.Is] and label logs and metrics with [Reason]. Error text never
// contains body bytes, header values or secrets, so it is safe to log.
//
// The signers ([SignStripe], [SignGitHub], [SignStandardWebhooks]) produce
// valid requests for the `inlet send` dev command and for end-to-end tests.
package verify
