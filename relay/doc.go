// Package relay is Inlet's pass-through mode (`inlet relay`): a public
// endpoint for providers that forwards each webhook to the customer's own
// ingress and stores nothing.
//
// POST /webhooks/{source} reads the body under the same limit as ingress and
// verifies the provider's signature with the same verifier (package
// ingress/verify, the same source configuration), so a forged webhook never
// leaves the relay. A verified one is forwarded over HTTPS to
// <target>/webhooks/{source} with its exact bytes and its headers (less the
// hop-by-hop ones and those a proxy or CDN edge in front of the relay adds
// about that hop, which one in front of the ingress sets anew: X-Forwarded-*,
// Forwarded, X-Real-Ip, Via, X-Amzn-Trace-Id, X-Cloud-Trace-Context,
// Cloudflare's CF-Ray and the rest, CDN-Loop, True-Client-IP, X-Request-Id,
// X-Envoy-*, Traceparent, Tracestate, B3, X-B3-*, Fastly-*, X-Azure-*,
// Akamai-*, and those of relay.unsigned_headers; a header the source's
// configuration reads is kept), signed with the relay's own
// Inlet-Relay-Signature (see verify.SignRelay for the format). The ingress hashes the headers it
// receives, so the relay signs and sends them as net/http will put them on
// the wire (wireHeaders): the first User-Agent only, none when it is empty;
// Cookie as the one "; "-joined value an HTTP/2 receiver rebuilds from its
// crumbs; Accept-Encoding without empty values, beside which a compressing
// transport would add its own. The customer's ingress, whose source
// lists the relay's secrets as relay_secrets, checks that signature and then
// the provider's, and commits the event; only then does the relay answer the
// provider 2xx. When the ingress fails or cannot be reached the provider gets
// 503 (or 502 when the ingress refused the request) with Retry-After, so it
// retries.
//
// The relay holds each body in memory only while it is in transit, and never
// logs a body or a header value. That is still weaker than a customer-hosted
// ingress, which is the only party to see the bytes.
package relay
