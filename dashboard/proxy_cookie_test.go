package dashboard_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// Behind a TLS-terminating proxy (the dashboard itself on plain HTTP), the
// session cookie is Secure when the proxy says the browser came over https:
// it was Secure only when this server ended TLS itself, so a browser would
// send the session over any plain-HTTP request to the same host.
func TestDashboardCookieIsSecureBehindATLSProxy(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	for _, proxied := range []http.Header{
		{"X-Forwarded-Proto": {"https"}},
		{"X-Forwarded-Proto": {"HTTPS, http"}},
		{"Forwarded": {`for=192.0.2.60;proto=https;by=203.0.113.43`}},
	} {
		c := b.client(t)
		extra := c.sameOrigin()
		for k, v := range proxied {
			extra[k] = v
		}
		r := c.do("POST", "/dashboard/login", url.Values{"token": {token}, "next": {"/dashboard/"}}, extra)
		if r.code != http.StatusSeeOther {
			t.Fatalf("login through the proxy (%v): %d", proxied, r.code)
		}
		if set := r.header.Get("Set-Cookie"); !strings.Contains(set, "; Secure") {
			t.Errorf("login through a TLS proxy (%v): Set-Cookie %q is not Secure", proxied, set)
		}
	}
	// Plain HTTP all the way (a loopback dashboard): not Secure, or the
	// cookie would never come back.
	c := b.client(t)
	r := c.do("POST", "/dashboard/login", url.Values{"token": {token}, "next": {"/dashboard/"}},
		http.Header{"Origin": {b.base}, "Sec-Fetch-Site": {"same-origin"}, "X-Forwarded-Proto": {"http"}})
	if set := r.header.Get("Set-Cookie"); r.code != http.StatusSeeOther || strings.Contains(set, "Secure") {
		t.Errorf("login over plain HTTP: %d, Set-Cookie %q", r.code, set)
	}
}
