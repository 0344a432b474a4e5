// Package httpforward is a ready consumer that forwards each event to an
// internal HTTP service: a POST of the exact raw body, with the provider's
// original headers (hop-by-hop and transport headers removed, and the
// sender's trace context replaced by the attempt's W3C traceparent) and
// Inlet's own:
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
package httpforward
