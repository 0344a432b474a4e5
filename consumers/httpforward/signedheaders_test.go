package httpforward_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/consumers"
	"github.com/inlet-dev/inlet/consumers/httpforward"
)

// Verify refuses a forwarded request whose Inlet metadata was changed after signing.
//
// Regression test (review helper-128; fixed: the text describes the
// behaviour before the fix). Inlet-Signature covers only "<t>.<job id>.<body>"
// (signature.go:44-52), and Verify (signature.go:59-101) checks nothing else,
// while the forwarder hands the internal service the metadata it acts on in
// headers no signature covers: Idempotency-Key, Inlet-Event-Type,
// Inlet-Provider, Inlet-Event-Id. A captured forwarded request can be resent
// within the 5-minute window with those headers rewritten and Verify still
// says nil:
//
//   - Idempotency-Key is THE idempotency key Inlet advertises (package doc,
//     Event.IdempotencyKey), and the standard header that off-the-shelf
//     idempotency middleware dedupes on. Rewritten to a fresh value, the
//     replay is applied a second time by a service that did everything the
//     docs asked (verify, then dedupe on Idempotency-Key).
//   - For GitHub (and every provider whose type lives only in a header), the
//     event type is nowhere in the signed bytes: a service cannot tell a
//     "push" from a "delete" it can trust, so "the internal service then
//     trusts one shared secret instead of every provider's scheme" (doc.go)
//     does not hold for routing. A rewritten Inlet-Event-Type verifies.
//
// Expected: a request whose Inlet metadata was altered after signing does not
// verify (at the least: Verify rejects an Idempotency-Key other than
// "inlet-job-<signed job id>").
func TestVerifyRejectsRewrittenInletMetadata(t *testing.T) {
	t.Parallel()
	srv := newService(t, http.StatusOK)
	f := newForwarder(t, httpforward.Config{URL: srv.URL})
	e := &consumers.Event{JobID: 77, EventID: 5, Handler: "forward", Provider: "github", EventType: "push",
		Headers: http.Header{"X-Github-Event": {"push"}}, Body: []byte(`{"ref":"refs/heads/main"}`), Attempt: 1, MaxAttempts: 25}
	if err := f(context.Background(), e); err != nil {
		t.Fatal(err)
	}
	reqs := srv.requests()
	if len(reqs) != 1 {
		t.Fatalf("%d requests", len(reqs))
	}
	captured := reqs[0]
	now := time.Now()
	if err := httpforward.Verify(secret, captured.header, captured.body, 0, now); err != nil {
		t.Fatalf("the genuine request does not verify: %v", err)
	}
	for _, c := range []struct{ header, value string }{
		{httpforward.HeaderIdempotencyKey, "inlet-job-999999"},
		{httpforward.HeaderEventType, "delete"},
		{httpforward.HeaderProvider, "stripe"},
	} {
		h := captured.header.Clone()
		h.Set(c.header, c.value)
		if err := httpforward.Verify(secret, h, captured.body, 0, now.Add(time.Minute)); err == nil {
			t.Errorf("captured request replayed with %s rewritten to %q: Verify = nil, want an error", c.header, c.value)
		}
	}
}
