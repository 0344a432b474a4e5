package httpforward_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/consumers"
	"github.com/inlet-dev/inlet/consumers/httpforward"
)

// verifyingService is an internal service that does what doc.go asks of one:
// it checks every request with httpforward.Verify and answers 401 when that
// fails, 200 otherwise. It records Verify's outcomes and what it received.
type verifyingService struct {
	*httptest.Server
	mu   sync.Mutex
	errs []error
	got  []http.Header
}

func newVerifyingService(t *testing.T) *verifyingService {
	t.Helper()
	s := &verifyingService{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		err := httpforward.Verify(secret, r.Header, body, 0, time.Now())
		s.mu.Lock()
		s.errs = append(s.errs, err)
		s.got = append(s.got, r.Header.Clone())
		s.mu.Unlock()
		if err != nil {
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(s.Close)
	return s
}

// TestSignedEventTypeWithOuterWhitespaceVerifies, before the fix: a genuine forwarded
// request for an event whose type begins or ends with a space or a tab never
// verifies at the service, so the job is refused (401, class http_4xx) on
// every attempt and ends dead-lettered.
//
// Regression test (review helper-129; fixed: the text describes the
// behaviour before the fix). The v2 signature (signature.go mac2) covers e.EventType as
// stored, but the value reaches the service through an HTTP header, and an
// HTTP header value has no leading or trailing whitespace (RFC 9110 5.5:
// OWS around a field value is not part of it; net/textproto trims it, as
// every HTTP server does). Verify then recomputes the MAC over the trimmed
// Inlet-Event-Type: mismatch. Ingress stores such types as they are: a
// type read from the body (event_type_json, every preset with a body type)
// is the JSON string byte for byte, only invalid UTF-8 and NUL are refused
// (ingress/verify/identity.go:121). The same holds for Inlet-Provider.
//
// Expected: a genuine request verifies whatever the event type's text (the
// metadata signed must be the metadata as the service receives it).
func TestSignedEventTypeWithOuterWhitespaceVerifies(t *testing.T) {
	t.Parallel()
	for _, typ := range []string{"order.created ", "\torder.created", " "} {
		srv := newVerifyingService(t)
		f := newForwarder(t, httpforward.Config{URL: srv.URL})
		e := &consumers.Event{JobID: 31, EventID: 9, Handler: "forward", Provider: "shop", EventType: typ,
			Body: []byte(`{"type":"` + typ + `"}`), Attempt: 1, MaxAttempts: 25}
		err := f(context.Background(), e)
		srv.mu.Lock()
		errs := srv.errs
		srv.mu.Unlock()
		if err != nil || len(errs) != 1 || errs[0] != nil {
			t.Errorf("event type %q: forward = %v; the service's Verify of the genuine request = %v; want both nil", typ, err, errs)
		}
	}
}

// TestForwardEventTypeWithControlCharacter, before the fix: an event whose type holds
// a newline (or any other control character but tab) is never delivered:
// every attempt fails before a byte is sent, classed "network" (a transient
// class: the handler's backoff retries it up to max_attempts, ~25 attempts
// over days) and ends dead-lettered, with no way to succeed; a replay of
// it fails again.
//
// Regression test (review helper-129; fixed: the text describes the
// behaviour before the fix). forward.go sets Inlet-Event-Type (and Inlet-Provider) to the
// stored text as is; net/http refuses to send a header value holding
// CR, LF or another CTL ("net/http: invalid header field value for
// \"Inlet-Event-Type\""), and forward.go:127-134 classes every client.Do
// error as network. Ingress accepts and stores such types (a type read from
// a JSON body, "order\ncreated" is a valid JSON string; identity.go:121
// refuses only invalid UTF-8 and NUL), so the event is stored, fanned out,
// and its http-forward job can never complete. signature.go's comment "a
// header value holds no newline, so the fields cannot be shifted into each
// other" relies on this refusal.
//
// Expected: the event is delivered (its type in a header-safe encoding,
// signed as sent), or, at the very least, the failure is permanent and
// says so (not a retried "network" error).
func TestForwardEventTypeWithControlCharacter(t *testing.T) {
	t.Parallel()
	srv := newVerifyingService(t)
	f := newForwarder(t, httpforward.Config{URL: srv.URL})
	e := &consumers.Event{JobID: 32, EventID: 10, Handler: "forward", Provider: "shop", EventType: "order\ncreated",
		Body: []byte(`{"type":"order\ncreated"}`), Attempt: 1, MaxAttempts: 25}
	err := f(context.Background(), e)
	srv.mu.Lock()
	n := len(srv.errs)
	srv.mu.Unlock()
	if err != nil || n != 1 {
		t.Errorf("event type %q: forward = %v (class %q), service got %d requests; want the event delivered once",
			e.EventType, err, consumers.ClassOf(err), n)
	}
}

// TestVerifyRefusesDuplicatedSignedIDs, before the fix: Verify refuses a request
// with two Inlet-Provider, two Inlet-Event-Type or two Idempotency-Key
// values, but accepts one carrying a second Inlet-Job-Id or Inlet-Event-Id
// appended to a captured request.
//
// Regression test (review helper-129; fixed: the text describes the
// behaviour before the fix). signature.go Verify checks header.Values(...) > 1 for
// Idempotency-Key, Inlet-Provider and Inlet-Event-Type (signature.go:114-121)
// but reads Inlet-Job-Id and Inlet-Event-Id with header.Get (the first value)
// and never looks for a second one. The duplicate checks exist because
// frameworks and proxies disagree on which of two values a header has (first,
// last, or both joined with ", " as Node.js does for unknown headers); the
// job id is the very value a service deduplicates on (Idempotency-Key is
// derived from it) and the event id is the other. A captured request resent
// within the tolerance with "Inlet-Job-Id: <fresh>" appended verifies, and
// a service (or the app behind a Go verifying proxy) that reads the last or
// joined value sees a fresh job: the replay is applied twice.
//
// Expected: Verify refuses more than one Inlet-Job-Id or Inlet-Event-Id
// value, as it does for the other signed headers (ErrMalformedSignature).
func TestVerifyRefusesDuplicatedSignedIDs(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_800_000_000, 0)
	body := []byte(`{"id":"evt_1"}`)
	good := signed(now, 42, body)
	if err := httpforward.Verify(secret, good, body, 0, now); err != nil {
		t.Fatalf("the genuine request does not verify: %v", err)
	}
	// The check the fix applied to the other signed headers.
	h := good.Clone()
	h.Add(httpforward.HeaderEventType, "refund.created")
	if err := httpforward.Verify(secret, h, body, 0, now); err == nil {
		t.Fatal("a second Inlet-Event-Type verifies: the premise of this test no longer holds")
	}
	for _, name := range []string{httpforward.HeaderJobID, httpforward.HeaderEventID} {
		h := good.Clone()
		h.Add(name, "999999")
		if err := httpforward.Verify(secret, h, body, 0, now.Add(time.Minute)); !errors.Is(err, httpforward.ErrMalformedSignature) {
			t.Errorf("captured request resent with a second %s: %v; want ErrMalformedSignature (as for a second %s)",
				name, err, httpforward.HeaderEventType)
		}
	}
}
