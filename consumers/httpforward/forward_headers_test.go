package httpforward_test

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/textproto"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/inlet-dev/inlet/consumers"
	"github.com/inlet-dev/inlet/consumers/httpforward"
	"github.com/inlet-dev/inlet/consumers/internal/consumertest"
	"github.com/inlet-dev/inlet/internal/testwait"
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

// TestForwardSendsTheURLsCredentialsNotTheProviders (review helper-235, fixed).
//
// Defect: an http-forward URL with credentials (https://user:pass@svc/hooks,
// which doc.go and every error path anticipate: "the URL never does [go into
// the error text], as it may carry credentials") authenticates the forwarder
// only for events whose stored headers have no Authorization. forward.go
// forward sets req.Header = forwardHeaders(e.Headers), and forwardHeaders
// copies the provider's Authorization; net/http's Client.send applies the
// URL's userinfo only when the request has no Authorization header. So every
// event of a source whose requests carry one (Okta: its hook secret, stored by
// ingress as "sha256:<hex>"; SendGrid, Twilio, Mailgun, or any provider
// pointed at a Basic-auth proxy in front of ingress: "Basic <creds>") is
// sent with the provider's credential instead of the forwarder's: the service
// answers 401, every attempt fails http_4xx and the job is dead-lettered,
// while the same handler's other events complete. The provider's credential
// (raw, for the Basic cases) is also handed to another origin, which Go's own
// client refuses to do on a cross-host redirect.
// Setup: real PostgreSQL (consumertest), the SDK service with one
// http-forward handler (max 3 attempts, no backoff) whose URL carries Basic
// credentials the internal service requires; three events: none with an
// Authorization header (control), one as ingress stores an Okta event, one
// carrying a provider's Basic credentials.
// Expected: all three jobs completed, each request authenticated with the
// URL's credentials and none carrying the provider's Authorization.
// Observed: control completed; the Okta and the Basic event each
// dead_letter after 3 attempts, all 3 http_4xx "answered 401 Unauthorized";
// the service received "sha256:4cb75cfc…" and "Basic cHJvdmlkZXI6aW5ncmVz…"
// (the provider's password, base64) on every attempt, never the URL's.
// Fixed by helper-236: forwardHeaders drops the provider's Authorization,
// Proxy-Authorization and Cookie (the provider-to-ingress hop's), so
// net/http sends the URL's user:password; doc.go and docs/pipeline.md say so.
func TestForwardSendsTheURLsCredentialsNotTheProviders(t *testing.T) {
	t.Parallel()
	const user, pass = "inlet-forwarder", "forwarder-basic-pw"
	var mu sync.Mutex
	gotAuth := map[string][]string{} // Inlet-Event-Id -> Authorization of each request
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		mu.Lock()
		id := r.Header.Get(httpforward.HeaderEventID)
		gotAuth[id] = append(gotAuth[id], r.Header.Get("Authorization"))
		mu.Unlock()
		if u, p, ok := r.BasicAuth(); !ok || u != user || p != pass {
			w.Header().Set("WWW-Authenticate", `Basic realm="billing"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	target := "http://" + user + ":" + pass + "@" + strings.TrimPrefix(srv.URL, "http://") + "/hooks"

	b := consumertest.New(t)
	svc, err := consumers.New(consumers.Config{
		Pool: b.Worker, Subscriber: b.Bus,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Handlers: []consumers.Handler{{
			Name: "forward", Provider: "*", MaxAttempts: 3,
			Backoff: func(int) time.Duration { return 0 },
			Func:    newForwarder(t, httpforward.Config{URL: target}),
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Stop(context.Background()) })
	b.StartStreamer(t, consumertest.StreamerOptions{})

	oktaSum := sha256.Sum256([]byte("okta-hook-authorization-value"))
	providerBasic := "Basic " + base64.StdEncoding.EncodeToString([]byte("provider:ingress-proxy-password"))
	cases := []struct {
		name, provider string
		auth           string // the stored Authorization, "" = none
	}{
		{"no Authorization (control)", "stripe", ""},
		{"Okta (token stored as its digest)", "okta", "sha256:" + hex.EncodeToString(oktaSum[:])},
		{"provider's Basic credentials", "sendgrid", providerBasic},
	}
	jobs := make([]int64, len(cases))
	events := make([]int64, len(cases))
	for i, c := range cases {
		h := map[string][]string{"Content-Type": {"application/json"}}
		if c.auth != "" {
			h["Authorization"] = []string{c.auth}
		}
		events[i] = b.InsertEvent(t, consumertest.EventParams{Provider: c.provider, EventType: "user.created",
			Body: []byte(`{"n":` + fmt.Sprint(i) + `}`), Headers: h})
		jobs[i] = b.JobID(t, events[i], "forward")
	}
	final := make([]consumertest.Job, len(cases))
	for i, id := range jobs {
		testwait.Eventually(t, 60*time.Second, fmt.Sprintf("job %d finished", id), func() (bool, string) {
			final[i] = b.Job(t, id)
			return final[i].Status == "completed" || final[i].Status == "dead_letter",
				fmt.Sprintf("status %s after %d attempts", final[i].Status, final[i].AttemptCount)
		})
	}
	if final[0].Status != "completed" {
		t.Fatalf("control event: %s; the service or the URL's credentials are wrong, not the defect", final[0].Status)
	}
	mu.Lock()
	defer mu.Unlock()
	for i, c := range cases[1:] {
		i++
		if final[i].Status == "completed" {
			continue
		}
		var classes []string
		for _, a := range b.Attempts(t, jobs[i]) {
			cl, e := "", ""
			if a.ErrorClass != nil {
				cl = *a.ErrorClass
			}
			if a.Error != nil {
				e = *a.Error
			}
			classes = append(classes, cl+" "+e)
		}
		t.Errorf("%s: job %s after %d attempts (%q); the service got Authorization %q, not the URL's Basic credentials",
			c.name, final[i].Status, final[i].AttemptCount, classes, gotAuth[fmt.Sprint(events[i])])
	}
}

// TestForwardDropsTheSendersNonW3CTraceContext (review helper-235, fixed).
//
// Defect: doc.go promises the provider's headers go on "with the sender's
// trace context replaced by the attempt's W3C traceparent", and review
// helper-65's fix (TestForwardDoesNotPropagateTheProvidersTraceContext) was
// made because "trace headers from the internet are not trusted": the
// internal service joined a trace, with the sampling flag, the sender chose.
// forward.go hopByHop drops only Traceparent, Tracestate and Baggage. The
// other trace-context formats a sender (or a proxy in front of ingress: an
// AWS ALB adds X-Amzn-Trace-Id, which commit 1ec8bd1 already treats as a
// proxy hop header for the relay) puts on the request are forwarded verbatim:
// B3 (Zipkin; Istio/Envoy sidecars read x-b3-*), Jaeger's uber-trace-id,
// AWS X-Ray's X-Amzn-Trace-Id, GCP's X-Cloud-Trace-Context, Datadog's
// x-datadog-*, Sentry's sentry-trace. A service whose propagator or mesh reads
// any of them continues the sender's trace (forced sampling included: "1" /
// "Sampled=1" / priority 2) instead of Inlet's, and gets two disagreeing
// trace contexts on one request.
// Setup: real HTTP service; the forwarder called with the attempt's span
// context (as the SDK runs it) on an event whose stored headers hold the
// sender's trace headers in each of these formats.
// Expected: the service sees Inlet's traceparent and none of the sender's
// trace headers.
// Observed: traceparent is Inlet's, and all 11 sender trace headers arrive
// unchanged (X-B3-Traceid deadbeef…, X-B3-Sampled 1, X-Amzn-Trace-Id
// Root=1-deadbeef-…;Sampled=1, …).
// Fixed by helper-236: forwardHeaders also drops B3, X-B3-*, Uber-Trace-Id,
// Uberctx-*, X-Amzn-Trace-Id, X-Cloud-Trace-Context, X-Datadog-* and
// Sentry-Trace (in '_' spellings too); doc.go and docs/pipeline.md list them.
func TestForwardDropsTheSendersNonW3CTraceContext(t *testing.T) {
	t.Parallel()
	const senderTrace = "deadbeefdeadbeefdeadbeefdeadbeef"
	sent := map[string]string{
		"B3":                          senderTrace + "-1111111111111111-1",
		"X-B3-Traceid":                senderTrace,
		"X-B3-Spanid":                 "1111111111111111",
		"X-B3-Sampled":                "1",
		"Uber-Trace-Id":               senderTrace + ":1111111111111111:0:1",
		"X-Amzn-Trace-Id":             "Root=1-deadbeef-deadbeefdeadbeefdeadbeef;Sampled=1",
		"X-Cloud-Trace-Context":       senderTrace + "/1229782938247303441;o=1",
		"X-Datadog-Trace-Id":          "16045690984503098046",
		"X-Datadog-Parent-Id":         "1229782938247303441",
		"X-Datadog-Sampling-Priority": "2",
		"Sentry-Trace":                senderTrace + "-1111111111111111-1",
	}
	srv := newService(t, http.StatusOK)
	e := event()
	e.Headers = http.Header{"Content-Type": {"application/json"}}
	for k, v := range sent {
		e.Headers.Set(k, v)
	}
	// The attempt's span context, as the SDK's attempt span gives the handler.
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	ctx := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, Remote: true}))
	if err := newForwarder(t, httpforward.Config{URL: srv.URL})(ctx, e); err != nil {
		t.Fatal(err)
	}
	reqs := srv.requests()
	if len(reqs) != 1 {
		t.Fatalf("%d requests, want 1", len(reqs))
	}
	h := reqs[0].header
	if tp := h.Get("Traceparent"); !strings.Contains(tp, tid.String()) {
		t.Fatalf("forwarded traceparent %q is not the attempt's: the premise of this test does not hold", tp)
	}
	var leaked []string
	for k := range sent {
		if v := h.Get(k); v != "" {
			leaked = append(leaked, k+": "+v)
		}
	}
	if len(leaked) > 0 {
		t.Errorf("the sender's trace context reached the service beside Inlet's traceparent (%d of %d headers): %q",
			len(leaked), len(sent), leaked)
	}
}

// TestForwardDropsTheProvidersCredentialsAndTraceHeadersInEverySpelling
// completes the two tests above (helper-236): Cookie and
// Proxy-Authorization are dropped with Authorization, the '_' spellings that
// CGI, WSGI, Rack and PHP read as the same header are dropped too, and the
// provider's other headers still reach the service.
func TestForwardDropsTheProvidersCredentialsAndTraceHeadersInEverySpelling(t *testing.T) {
	t.Parallel()
	srv := newService(t, http.StatusOK)
	e := event()
	e.Headers = http.Header{
		"Content-Type":        {"application/json"},
		"Authorization":       {"Bearer provider-token"},
		"Proxy-Authorization": {"Basic cHJveHk6cHc="},
		"Cookie":              {"session=provider"},
		"Proxy":               {"http://sender.example:3128"}, // httpoxy
		"X_b3_traceid":        {"deadbeefdeadbeefdeadbeefdeadbeef"},
		"X_datadog_trace_id":  {"16045690984503098046"},
		"Uber_trace_id":       {"deadbeef:1111111111111111:0:1"},
		"Uberctx-Tenant":      {"sender"},
		"Sentry_trace":        {"deadbeefdeadbeefdeadbeefdeadbeef-1111111111111111-1"},
		"X-Request-Id":        {"req-1"},
		"User-Agent":          {"Provider-Hookshot/1.0"},
	}
	if err := newForwarder(t, httpforward.Config{URL: srv.URL})(context.Background(), e); err != nil {
		t.Fatal(err)
	}
	reqs := srv.requests()
	if len(reqs) != 1 {
		t.Fatalf("%d requests, want 1", len(reqs))
	}
	h := reqs[0].header
	for k := range e.Headers {
		got, kept := h[textproto.CanonicalMIMEHeaderKey(k)]
		switch k {
		case "Content-Type", "X-Request-Id", "User-Agent":
			if !kept {
				t.Errorf("%s was not forwarded", k)
			}
		default:
			if kept {
				t.Errorf("%s reached the service: %q", k, got)
			}
		}
	}
}
