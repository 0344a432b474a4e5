package httpforward_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/textproto"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/consumers"
	"github.com/inlet-dev/inlet/consumers/httpforward"
)

// Regression test for a defect found by review helper-95 (fixed; the text below
// describes the behaviour before the fix).
//
// the provider's "Expect: 100-continue" (kept by ingress: Go's
// server leaves it in r.Header, so it is stored in events.headers; curl and
// many HTTP clients send it for larger bodies) is forwarded. It is a
// per-hop transfer negotiation of the provider's original request, long
// over when the job runs (ingress/verify/relay.go:69 lists it among the
// headers a relay never forwards). Forwarded, it makes the forwarder's own
// transport wait for a "100 Continue" before sending the body: against an
// internal service that does not send one, every delivery of such an event
// stalls for the transport's ExpectContinueTimeout (1 s) before the body
// goes out.
//
// Expected: Expect is dropped like the other hop-by-hop/transport headers
// (package doc: "hop-by-hop and transport headers removed"), and the body
// is sent at once.
func TestForwardDropsTheProvidersExpectHeader(t *testing.T) {
	t.Parallel()
	// A plain HTTP/1.1 service that reads the request as it comes (it never
	// sends 100 Continue; RFC 9110 §10.1.1 lets a server skip it).
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	type seen struct {
		header   textproto.MIMEHeader
		bodyWait time.Duration
	}
	got := make(chan seen, 1)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
		r := textproto.NewReader(bufio.NewReader(conn))
		if _, err := r.ReadLine(); err != nil {
			return
		}
		h, err := r.ReadMIMEHeader()
		if err != nil {
			return
		}
		headersAt := time.Now()
		n, _ := strconv.Atoi(h.Get("Content-Length"))
		_, _ = io.ReadFull(r.R, make([]byte, n))
		got <- seen{header: h, bodyWait: time.Since(headersAt)}
		_, _ = io.WriteString(conn, "HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n")
	}()

	e := event()
	e.Body = []byte(strings.Repeat(`{"k":"v"}`, 200))
	e.Headers = http.Header{"Content-Type": {"application/json"}, "Expect": {"100-continue"}}
	f := newForwarder(t, httpforward.Config{URL: "http://" + ln.Addr().String() + "/hooks"})
	if err := f(context.Background(), e); err != nil {
		t.Fatalf("forward: %v", err)
	}
	s := <-got
	if v := s.header.Get("Expect"); v != "" {
		t.Errorf("forwarded the provider's Expect: %q (a transfer negotiation of the original hop)", v)
	}
	if s.bodyWait > 500*time.Millisecond {
		t.Errorf("the body came %s after the headers: the forwarder waited for a 100 Continue the service never sends", s.bodyWait.Round(time.Millisecond))
	}
}

// Regression test for a defect found by review helper-95 (fixed; the text below
// describes the behaviour before the fix).
//
// only "Inlet-*" and "Idempotency-Key" themselves are dropped from
// the provider's headers, not their underscore spellings. Many receivers
// (CGI/WSGI/Rack/PHP: HTTP_INLET_JOB_ID, HTTP_IDEMPOTENCY_KEY) map '-' and
// '_' to the same name, so a sender's "Idempotency_Key" or "Inlet_Provider"
// arrives as a second value of (or in place of) the header Inlet set — the
// spoofing forwardHeaders exists to prevent ("only Inlet sets Inlet-* and
// Idempotency-Key"). This is why nginx, Apache 2.4 and gunicorn drop
// underscored headers by default.
//
// Expected: no forwarded header whose name, '_' read as '-', is Inlet's own.
func TestForwardDropsUnderscoreSpellingsOfInletHeaders(t *testing.T) {
	t.Parallel()
	srv := newService(t, http.StatusOK)
	e := event()
	e.Headers = http.Header{
		"Content-Type":    {"application/json"},
		"Idempotency_key": {"attacker-key"},
		"Inlet_provider":  {"stripe"},
		"Inlet_job_id":    {"1"},
	}
	if err := newForwarder(t, httpforward.Config{URL: srv.URL})(context.Background(), e); err != nil {
		t.Fatal(err)
	}
	reqs := srv.requests()
	if len(reqs) != 1 {
		t.Fatalf("%d requests", len(reqs))
	}
	for k, v := range reqs[0].header {
		norm := textproto.CanonicalMIMEHeaderKey(strings.ReplaceAll(k, "_", "-"))
		if norm != k && (strings.HasPrefix(norm, "Inlet-") || norm == httpforward.HeaderIdempotencyKey) {
			t.Errorf("forwarded %s: %q — read as %s by CGI-style receivers", k, v, norm)
		}
	}
}

// Regression test for a defect found by review helper-95 (fixed; the text below
// describes the behaviour before the fix).
//
// the package doc promises "Only the status and at most 200 bytes of
// the answer go into the error text", but the answer's reason phrase
// (resp.Status, e.g. "503 <anything>") goes in whole and unquoted: an
// internal service's status line of a few KB (a stack trace or echoed
// request data in the reason phrase) fills jobs.last_error / job_attempts
// up to the SDK's 2000-byte cap, however the body part is bounded.
//
// Expected: the error carries the status code (and at most a bounded,
// quoted reason phrase) plus at most 200 bytes of the answer.
func TestForwardErrorBoundsTheAnswersReasonPhrase(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	reason := strings.Repeat("R", 1500)
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
				br := bufio.NewReader(conn)
				req, err := http.ReadRequest(br)
				if err != nil {
					return
				}
				_, _ = io.Copy(io.Discard, req.Body)
				fmt.Fprintf(conn, "HTTP/1.1 503 %s\r\nContent-Length: 5\r\nConnection: close\r\n\r\nbusy!", reason)
			}()
		}
	}()
	err = newForwarder(t, httpforward.Config{URL: "http://" + ln.Addr().String()})(context.Background(), event())
	if err == nil {
		t.Fatal("503: success")
	}
	if c := consumers.ClassOf(err); c != consumers.ClassHTTP5xx {
		t.Errorf("class %q", c)
	}
	if n := strings.Count(err.Error(), "R"); n > 200 {
		t.Errorf("error text carries %d bytes of the answer's reason phrase (%d bytes in all); the doc bounds the answer to 200", n, len(err.Error()))
	}
}
