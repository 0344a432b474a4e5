package relay_test

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/inlet-dev/inlet/ingress"
)

// withPadding adds n header lines X-Pad-1 … X-Pad-n to req.
func withPadding(req *http.Request, n int) *http.Request {
	for i := 1; i <= n; i++ {
		req.Header.Set(fmt.Sprintf("X-Pad-%d", i), "p")
	}
	return req
}

// TestRelayPassesOnAHeaderLimitRefusal (review helper-74).
//
// Defect: the ingress refuses a request over its fixed header limits
// (ingress.MaxHeaderCount 100 lines, MaxHeaderBytes 32 KiB) with 431
// too_many_headers / headers_too_large: "over a limit, every retry would be
// refused too" (ingress/server.go withinLimits). The relay does not check
// these limits itself, verifies the webhook, forwards it, and then maps the
// ingress's 431 to 502 ingress_rejected with Retry-After (relay/relay.go,
// handleWebhook's default case; permanentReason only knows 400 reasons). The
// provider is told to retry a request that will be refused on every retry, for
// days, though DESIGN says "A fault the same request would hit again (a key
// field over its limit, malformed) is 4xx, never 5xx". The limits are
// constants, not settings an operator could align (the comment's "secrets,
// limits, clocks").
//
// Expected: the provider gets a 4xx without Retry-After (the ingress's 431
// passed on, as TestRelayPassesOnARefusalOfTheEventsOwnData does for 400), or
// the relay applies the same header limits before forwarding.
func TestRelayPassesOnAHeaderLimitRefusal(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	body := []byte(`{"id":"evt_review_headers","type":"invoice.paid"}`)
	req := withPadding(stripeRequest(t, b.relayURL, body, time.Now()), 150) // far over 100 lines
	code, answer, hdr := do(t, req)
	if code/100 == 5 || hdr.Get("Retry-After") != "" {
		t.Fatalf("relay answered %d %s (Retry-After %q) for a request the ingress refuses on every retry (431 too_many_headers): "+
			"the provider retries it for days; want the ingress's 4xx passed on, no Retry-After\nrelay log:\n%s",
			code, strings.TrimSpace(answer), hdr.Get("Retry-After"), b.relayLogs.String())
	}
}

// TestRelayHeadersCountAgainstIngressLimit (review helper-74).
//
// Defect: the ingress counts a request's header lines for MaxHeaderCount (and
// bytes for MaxHeaderBytes) on the request as received, Inlet-Relay-Headers,
// Inlet-Relay-Signature and Inlet-Relay-Id included (ingress/server.go,
// withinLimits: checkHeaders(wh.r.Header), before relay.check strips them),
// although those three are not stored (the stored headers are the provider's,
// which checkEvent checks again). So a webhook with 100 header lines, which
// the same ingress accepts and stores when the provider delivers it directly,
// is refused 431 when it comes through inlet relay (103 lines), and the relay
// turns that into 502 + Retry-After: the provider retries it forever and it
// is never stored. (The Inlet-Relay-Headers list and the signature likewise
// eat into the 32 KiB byte limit.)
//
// Expected: relaying is transparent: an event the ingress would store when
// sent directly is stored when relayed (200).
func TestRelayHeadersCountAgainstIngressLimit(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})

	// stripeRequest's headers as a server sees them: Stripe-Signature,
	// Content-Type, User-Agent, X-Trace ×2 and Content-Length = 6 lines;
	// padded to exactly ingress.MaxHeaderCount.
	pad := ingress.MaxHeaderCount - 6

	// The same ingress code with a direct stripe source (no relay_secrets)
	// on the same database: a delivery with these headers is stored.
	direct, err := ingress.New(ingress.Config{
		Section: ingress.Section{MaxBodyBytes: 1 << 20, StoreTimeout: 10 * time.Second},
		Sources: testSources(),
		Store:   ingress.NewPGStore(b.admin, nil),
		Logger:  slog.New(slog.DiscardHandler),
		Metrics: prometheus.NewRegistry(),
	})
	if err != nil {
		t.Fatal(err)
	}
	ds := httptest.NewServer(direct.Handler())
	t.Cleanup(ds.Close)
	code, answer, _ := do(t, withPadding(stripeRequest(t, ds.URL, []byte(`{"id":"evt_review_direct","type":"invoice.paid"}`), time.Now()), pad))
	if code != http.StatusOK {
		t.Fatalf("direct delivery with %d header lines: %d %s; the test's premise (the ingress accepts it) does not hold", ingress.MaxHeaderCount, code, answer)
	}

	// The same webhook shape through the relay.
	code, answer, hdr := do(t, withPadding(stripeRequest(t, b.relayURL, []byte(`{"id":"evt_review_relayed","type":"invoice.paid"}`), time.Now()), pad))
	if code != http.StatusOK {
		t.Fatalf("relayed delivery with %d header lines (stored when delivered directly): relay answered %d %s (Retry-After %q); "+
			"want 200 stored: the relay's own Inlet-Relay-* headers pushed it over the ingress's header limit\nrelay log:\n%s",
			ingress.MaxHeaderCount, code, strings.TrimSpace(answer), hdr.Get("Retry-After"), b.relayLogs.String())
	}
}

// Headers a proxy adds between the relay and the ingress (not signed, not
// stored) do not count against the ingress's header limits: a proxy adding
// enough of them had the ingress answer 431, which the relay passes on to the
// provider as a permanent refusal.
func TestProxyHeadersAfterTheRelayDoNotCountAgainstLimits(t *testing.T) {
	t.Parallel()
	b := setup(t, options{tamper: func(req *http.Request) {
		for i := range ingress.MaxHeaderCount {
			req.Header.Add(fmt.Sprintf("X-Proxy-Hop-%d", i), "via")
		}
	}})
	code, answer, _ := do(t, stripeRequest(t, b.relayURL, []byte(`{"id":"evt_proxy_headers","type":"invoice.paid"}`), time.Now()))
	if code != http.StatusOK {
		t.Fatalf("relayed delivery with %d headers added after the relay: %d %s; want 200 stored (those headers are neither signed nor stored)",
			ingress.MaxHeaderCount, code, strings.TrimSpace(answer))
	}
	if b.events(t) != 1 {
		t.Fatalf("%d events stored, want 1", b.events(t))
	}
}
