// Package ingress is Inlet's webhook receiver: POST /webhooks/{source} verifies
// the source's signature over the exact raw bytes, stores the event (and, by the
// schema's fan-out trigger, one job per subscribed handler) in one transaction,
// and answers 2xx only after that transaction commits. Nothing else happens
// inside the request: delivery to handlers is the streamer's.
//
// Answers: 200 stored or duplicate, 401 bad/missing/stale signature (nothing
// stored, body never echoed), 400 verified but unreadable event or a key field
// over its limit (MaxExternalIDBytes, MaxEventTypeBytes), 404 unknown source,
// 405 wrong method, 408 body too slow (its head not within 2 s, the rest not
// within the read timeout), 413 body over the limit, 431 headers over
// MaxHeaderCount or MaxHeaderBytes, 503 + Retry-After when the database did not
// take the write or its outcome is unknown (sent, but no answer came within the
// store timeout: the transaction may still commit, and the provider's retry is
// then answered duplicate), so the provider retries. A fault the same request
// would meet again is 4xx and stores nothing; only one that may pass is 5xx.
//
// Bodies are held within ingress.max_inflight_bytes: room for a body's head
// (and its request's headers) first, for its rest once the head has arrived
// (see internal/bodyread), so slow senders hold little of it and the rest
// waits unread while it is spent; the requests waiting are bounded too, and
// past that bound answered 503 overloaded at once. A body parsed for the
// subscription filters reserves room for its parse first (parseRoom), and
// ingress.max_connections bounds the connections open at once.
package ingress
