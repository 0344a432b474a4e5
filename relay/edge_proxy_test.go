package relay_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/relay"
)

// edgeProxy is a reverse proxy to target that adds, on each request, the
// headers a CDN or an edge proxy documents adding to what it sends to the
// origin: set puts a fresh value per request (Cloudflare's CF-Ray, an Envoy
// edge's x-request-id, which Envoy regenerates for an external request),
// appendTo adds its token after any value already there (Cloudflare's
// CDN-Loop: "cloudflare"). X-Forwarded-For is appended too, as both do.
func edgeProxy(t *testing.T, target string, tlsTarget http.RoundTripper, tls bool, set []string, appendTo map[string]string) *httptest.Server {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	p := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(u)
			r.SetXForwarded()
			for _, h := range set {
				var b [8]byte
				_, _ = rand.Read(b[:])
				r.Out.Header.Set(h, hex.EncodeToString(b[:]))
			}
			for h, token := range appendTo {
				if v := r.In.Header.Get(h); v != "" {
					r.Out.Header.Set(h, v+", "+token)
				} else {
					r.Out.Header.Set(h, token)
				}
			}
		},
		Transport: tlsTarget,
	}
	var s *httptest.Server
	if tls {
		s = httptest.NewTLSServer(p) // httptest's TLS servers share one certificate: the relay's CA file trusts it
	} else {
		s = httptest.NewServer(p)
	}
	t.Cleanup(s.Close)
	return s
}

// TestRelayBetweenEdgeProxies (review helper-242, fixed).
// Defect: helper-228's fix (3b16568, 1ec8bd1) has the relay neither
// forward nor sign a fixed list of proxy headers (X-Forwarded-*, Forwarded,
// X-Real-Ip, Via, X-Amzn-Trace-Id), so that "a header a proxy adds on the
// way is not covered and does not break it (the relay does not sign the one
// its own proxy set)" (docs/operations.md, Relay mode). Every other header
// an edge in front of the relay sets is still forwarded and signed
// (ingress/verify/relay.go: RelayForwardHeaders, proxyHeaders): behind
// Cloudflare the relay signs CF-Ray, CF-Connecting-IP and CDN-Loop; behind
// an Envoy edge (Istio, Envoy Gateway, Contour, Emissary) x-request-id.
// The same edge in front of the customer's ingress sets a fresh CF-Ray /
// x-request-id and appends to CDN-Loop, so the listed values no longer
// match and the ingress refuses every relayed delivery with
// relay_headers_mismatch: the provider gets 502 on every retry and the
// event is never stored. Neither relay nor ingress ends TLS, so both sit
// behind such a proxy by design; the same CDN in front of both is the
// ordinary setup.
// Setup: real ingress (TLS, real PostgreSQL) behind an edge proxy, the
// relay behind another of the same kind (httputil.ReverseProxy adding the
// headers Cloudflare documents: a per-request CF-Ray, CDN-Loop
// appended; or an Envoy edge's fresh x-request-id); a Stripe
// webhook signed by stripe-go posted to the relay's edge.
// Expected: 200, one event stored, as with helper-228's X-Forwarded-For.
// Observed: 502 for both (ingress reason relay_headers_mismatch), 0 events.
// Fixed (helper-248): the relay neither forwards nor signs a wider default
// set of the headers proxies and CDN edges set about each hop
// (ingress/verify/relay.go, relayUnsignedDefaults: the earlier list plus
// X-Cloud-Trace-Context, Cloudflare's CF-Ray, CF-Connecting-IP and the
// rest named one by one, CDN-Loop, True-Client-IP, X-Request-Id,
// X-Envoy-*, Traceparent, Tracestate, B3, X-B3-*, Fastly-*, X-Azure-*,
// Akamai-*), one verify.RelayUnsigned set for forwarding and signing;
// relay.unsigned_headers adds names and prefixes (TestRelayUnsignedHeaders),
// and a header a source's configuration reads is kept.
func TestRelayBetweenEdgeProxies(t *testing.T) {
	t.Parallel()
	for _, edge := range []struct {
		name     string
		set      []string
		appendTo map[string]string
	}{
		{"cloudflare", []string{"Cf-Ray"}, map[string]string{"Cdn-Loop": "cloudflare"}},
		{"envoy", []string{"X-Request-Id"}, nil},
	} {
		t.Run(edge.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, options{})
			// The customer's edge in front of its ingress (TLS: relay.target
			// is https).
			ips := edgeProxy(t, b.ingressURL, mustTransport(t, b.caFile), true, edge.set, edge.appendTo)
			// The relay, pointed at that edge, behind an edge of its own.
			rs := b.startRelay(t, relay.Section{Target: ips.URL, Secrets: []string{relaySecret}, CAFile: b.caFile,
				Timeout: 5 * time.Second, MaxBodyBytes: 4 << 10}, options{})
			rps := edgeProxy(t, rs.URL, nil, false, edge.set, edge.appendTo)

			body := []byte(`{"id":"evt_edge_` + edge.name + `","type":"invoice.paid"}`)
			code, answer, _ := do(t, stripeRequest(t, rps.URL, body, time.Now()))
			if code != http.StatusOK || b.events(t) != 1 {
				reason := "?"
				if logs := b.relayLogs.String(); strings.Contains(logs, `"ingress_reason":"`) {
					reason = strings.SplitN(strings.SplitN(logs, `"ingress_reason":"`, 2)[1], `"`, 2)[0]
				}
				t.Fatalf("a verified webhook through a %s edge before the relay and one before the ingress: relay answered %d %s (ingress reason %s), %d events stored; want 200 and 1 event",
					edge.name, code, strings.TrimSpace(answer), reason, b.events(t))
			}
		})
	}
}

// An edge that sets a header of its own, not among the defaults, before the
// relay and again before the ingress: relay.unsigned_headers (a prefix
// here, in another case than the edge's) keeps it out of what the relay
// forwards and signs, and so out of the stored row; without it every
// relayed delivery is refused. A header the source reads is kept even when
// an entry names it (helper-248).
func TestRelayUnsignedHeaders(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name     string
		unsigned []string
		want     int
	}{
		{"not configured", nil, http.StatusBadGateway},
		// Stripe-*: what the stripe source reads (Stripe-Signature) is
		// forwarded and signed all the same, with a warning.
		{"configured", []string{"Authorization", "x-edge-*", "Stripe-*"}, http.StatusOK},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, options{})
			set := []string{"X-Edge-Hop"}
			ips := edgeProxy(t, b.ingressURL, mustTransport(t, b.caFile), true, set, nil)
			rs := b.startRelay(t, relay.Section{Target: ips.URL, Secrets: []string{relaySecret}, CAFile: b.caFile,
				Timeout: 5 * time.Second, MaxBodyBytes: 4 << 10, UnsignedHeaders: c.unsigned}, options{})
			rps := edgeProxy(t, rs.URL, nil, false, set, nil)
			body := []byte(`{"id":"evt_unsigned_headers","type":"invoice.paid"}`)
			req := stripeRequest(t, rps.URL, body, time.Now())
			req.Header.Set("Authorization", "Bearer "+canary) // the operator's entry: not forwarded either
			code, answer, _ := do(t, req)
			if code != c.want {
				t.Fatalf("relay.unsigned_headers %q: relay answered %d %s, want %d", c.unsigned, code, strings.TrimSpace(answer), c.want)
			}
			if code != http.StatusOK {
				if n := b.events(t); n != 0 {
					t.Fatalf("%d events stored after a refusal", n)
				}
				return
			}
			var headers map[string][]string
			if err := b.admin.QueryRow(context.Background(), `SELECT headers FROM webhook_ingress.events
				WHERE provider = 'stripe' AND external_event_id = 'evt_unsigned_headers'`).Scan(&headers); err != nil {
				t.Fatal(err)
			}
			for name := range headers {
				if strings.EqualFold(name, "X-Edge-Hop") || strings.EqualFold(name, "Authorization") {
					t.Errorf("stored headers hold %s, which relay.unsigned_headers names", name)
				}
			}
			if len(headers["Stripe-Signature"]) != 1 {
				t.Errorf("stored headers lack Stripe-Signature: %v", headers)
			}
			if logs := b.relayLogs.String(); !strings.Contains(logs, `"source":"stripe","header":"Stripe-Signature"`) {
				t.Errorf("no warning that the stripe source reads Stripe-Signature, which relay.unsigned_headers names:\n%s", logs)
			}
		})
	}
}

// relay.unsigned_headers takes header names and prefixes ending in '*';
// anything else is refused at start, naming the key and the entry.
func TestRelayUnsignedHeadersConfig(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		entries []string
		want    string // "" for accepted
	}{
		{[]string{"X-Edge-Id", "x-edge-*", "Cf-*", "My_Header"}, ""},
		{[]string{"*"}, `relay.unsigned_headers[0]: "*" alone`},
		{[]string{"X-Ok", ""}, "relay.unsigned_headers[1]"},
		{[]string{"X Edge"}, `relay.unsigned_headers[0]: "X Edge": want a header name`},
		{[]string{"X-*-Id"}, `relay.unsigned_headers[0]: "X-*-Id"`},
		{[]string{"X-Edge**"}, `relay.unsigned_headers[0]: "X-Edge**"`},
		{[]string{"X-Edge:"}, `relay.unsigned_headers[0]: "X-Edge:"`},
	} {
		sec := relay.Section{Target: "https://ingress.example", Secrets: []string{relaySecret}, UnsignedHeaders: c.entries}
		err := sec.Validate()
		_, newErr := relay.New(relay.Config{Section: sec, Sources: testSources()})
		for _, e := range []error{err, newErr} {
			switch {
			case c.want == "" && e != nil:
				t.Errorf("%q: %v, want accepted", c.entries, e)
			case c.want != "" && (e == nil || !strings.Contains(e.Error(), c.want)):
				t.Errorf("%q: error %v, want one containing %s", c.entries, e, c.want)
			}
		}
	}
}
