// Package httpforward is a ready consumer that forwards each event to an
// internal HTTP service: a POST of the exact raw body, with the provider's
// original headers (hop-by-hop and transport headers removed, and the
// sender's credentials and trace context too, see below) and Inlet's own:
//
//	Inlet-Job-Id, Inlet-Event-Id, Inlet-Provider, Inlet-Event-Type,
//	Inlet-Attempt, Idempotency-Key (= Event.IdempotencyKey())
//	Inlet-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<job id>.<body>")>,
//	                 v2=<hex HMAC-SHA256(secret, "<t>\n<job id>\n<event id>\n<provider>\n<event type>\n<body>")>
//
// The internal service then trusts one shared secret instead of every
// provider's scheme; Go services check requests with [Verify], which takes
// v2 only: v2 covers what a service routes and deduplicates on (the event's
// id, source and type, as their headers carry them: see [HeaderValue];
// Idempotency-Key is the signed job's), v1 only the job id and the body, and
// is sent for services that verify it still. Upgrade
// the consumers that forward before the services that verify. Any non-2xx
// answer fails the attempt and is retried by the handler's backoff (class
// http_4xx or http_5xx), or after the answer's Retry-After when that is
// later (delay-seconds or an HTTP-date; at most 24h); unreachable services fail with class network,
// slow ones with timeout. Redirects are not followed. Only the status and
// at most 200 bytes of the answer go into the error text, which stays in
// Postgres; the URL never does, as it may carry credentials.
//
// Some of the provider's headers are never forwarded:
//
//   - Authorization, Proxy-Authorization and Cookie: they are the
//     credentials of the provider's request to ingress (checked there, or by
//     a proxy before it), not the service's to read, and the URL's own
//     credentials (https://user:pass@svc/hooks) are sent as Authorization
//     in their place.
//   - Proxy, which a CGI-style service reads as HTTP_PROXY and would send
//     its own outbound requests through ("httpoxy").
//   - The sender's trace context, which is not trusted (ingress starts a
//     trace of its own): Traceparent, Tracestate, Baggage, B3, X-B3-*,
//     Uber-Trace-Id, Uberctx-*, X-Amzn-Trace-Id, X-Cloud-Trace-Context,
//     X-Datadog-* and Sentry-Trace. The request carries the attempt's W3C
//     traceparent instead.
//   - What the proxies and CDN edges in front of ingress said about that
//     hop: X-Forwarded-*, Forwarded, X-Real-Ip, Via, True-Client-IP,
//     Cloudflare's CF-Connecting-IP, CF-Connecting-IPv6, CF-Pseudo-IPv4,
//     CF-IPCountry, CF-Visitor, CF-EW-Via, CF-Worker, CF-Ray and CDN-Loop,
//     X-Envoy-*, Fastly-*, X-Azure-* and Akamai-* (a relay's unsigned
//     defaults, less X-Request-Id). The service and its proxies would read
//     them about the forward: a client address the sender could set, and a
//     mesh sidecar's instructions from an internal caller (X-Envoy-Retry-On
//     sends the POST again).
//
// Names spelt with '_' for '-' (X_B3_Traceid) are dropped alike, as CGI,
// WSGI, Rack and PHP read them as the same header; so is any claiming
// Inlet's own names (Inlet-*, Idempotency-Key).
package httpforward
