package httpforward_test

import (
	"context"
	"net/http"
	"net/textproto"
	"testing"

	"github.com/inlet-dev/inlet/consumers/httpforward"
)

// What the proxies and CDN edges in front of ingress said about the
// provider's hop is stored with the event; the forward is another hop, and
// the service and the proxies in front of it read those headers about it: a
// client address the sender could set (nginx appends to the X-Forwarded-For
// the sender sent, so the service's leftmost entry is the sender's choice),
// a scheme or host to build links with, and the instructions an Envoy
// sidecar takes from an internal caller (X-Envoy-Retry-On: 5xx with
// X-Envoy-Max-Retries: 5 would have the mesh send one attempt's POST up to six times).
// The relay drops the same family (ingress/verify/relay.go), less
// X-Request-Id, which a service may log and is forwarded.
func TestForwardDropsWhatProxiesSaidAboutTheProvidersHop(t *testing.T) {
	t.Parallel()
	srv := newService(t, http.StatusOK)
	e := event()
	e.Headers = http.Header{
		"Content-Type":                   {"application/json"},
		"X-Request-Id":                   {"req-1"},
		"User-Agent":                     {"Stripe/1.0"},
		"X-Forwarded-For":                {"10.0.0.1, 203.0.113.7"},
		"X-Forwarded-Proto":              {"http"},
		"X-Forwarded-Host":               {"attacker.example"},
		"X_forwarded_for":                {"10.0.0.2"},
		"Forwarded":                      {"for=10.0.0.1;proto=http"},
		"X-Real-Ip":                      {"10.0.0.1"},
		"Via":                            {"1.1 edge"},
		"True-Client-Ip":                 {"10.0.0.1"},
		"Cf-Connecting-Ip":               {"10.0.0.1"},
		"Cf-Connecting-Ipv6":             {"fd00::1"},
		"Cf-Pseudo-Ipv4":                 {"10.0.0.1"},
		"Cf-Ipcountry":                   {"XX"},
		"Cf-Visitor":                     {`{"scheme":"https"}`},
		"Cf-Ew-Via":                      {"15"},
		"Cf-Worker":                      {"edge.example"},
		"Cf-Ray":                         {"8a1b2c3d4e5f6a7b-FRA"},
		"Cdn-Loop":                       {"cloudflare"},
		"X-Envoy-Retry-On":               {"5xx"},
		"X-Envoy-Max-Retries":            {"5"},
		"X-Envoy-Upstream-Rq-Timeout-Ms": {"1"},
		"Fastly-Client-Ip":               {"10.0.0.1"},
		"X-Azure-Clientip":               {"10.0.0.1"},
		"Akamai-Origin-Hop":              {"2"},
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
				t.Errorf("%s, said about the provider's hop into ingress, reached the service: %q", k, got)
			}
		}
	}
}
