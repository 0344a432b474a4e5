package dashboard_test

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/admin"
	"github.com/inlet-dev/inlet/dashboard"
)

// TestSessionWorksBehindAnSSOProxyThatSendsABearer (review helper-162, fixed; this describes the code before the fix):
// dashboard/auth.go, authenticated: a request that presents ANY
// bearer token (admin.BearerPresented) is judged by that token alone, before
// the session cookie is looked at, and a wrong one is charged to the shared
// AuthLimiter. The common way to put SSO in front of an internal dashboard
// is an authenticating proxy that forwards the user's identity as
// "Authorization: Bearer <OIDC id token>" (oauth2-proxy
// --pass-authorization-header / --set-authorization-header, Pomerium,
// Ambassador/Envoy ext_authz filters). Behind it, the operator logs in with
// the admin token (the form is not behind authenticated) and gets a valid
// session cookie, yet every dashboard page is answered 401 "Missing or wrong
// bearer token." and each page load is counted as a WRONG ADMIN TOKEN: after
// ten, the proxy's address (i.e. every operator) gets 429 even with the right
// token on the admin API and the login form. This is the same lock-out that
// helper-88 fixed for a Basic-auth proxy (ef0dc5e); the fix only exempted
// other schemes.
//
// Now: a request whose session cookie names a live session is that
// session: its pages are served, and the proxy's Authorization header is
// neither compared nor charged (comparing it would give a logged-in user an
// unlimited token oracle; ignoring it costs nothing, since the cookie already
// authenticates). The right bearer token keeps working on the API.
func TestSessionWorksBehindAnSSOProxyThatSendsABearer(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	// As cmd/inlet wires it (startAdmin): one limiter for the API and the dashboard.
	lim := admin.NewAuthLimiter(admin.AuthLimit{Now: func() time.Time { return b.now }}) // frozen clock
	log := slog.New(slog.DiscardHandler)
	d, err := dashboard.New(dashboard.Config{DB: b.op, Token: token, Logger: log, Now: func() time.Time { return b.now }, AuthLimiter: lim})
	if err != nil {
		t.Fatal(err)
	}
	api, err := admin.NewAPI(admin.APIConfig{Token: token, DB: b.op, Logger: log, Dashboard: d, AuthLimiter: lim})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api.Handler())
	t.Cleanup(srv.Close)

	// What an oauth2-proxy with --pass-authorization-header adds to every
	// request it forwards: the user's OIDC id token as a bearer.
	const idToken = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJvcGVyYXRvckBleGFtcGxlLmNvbSJ9.c2lnbmF0dXJl"
	c := &client{t: t, base: srv.URL, header: http.Header{"Authorization": {"Bearer " + idToken}}}
	c.login() // the login form is reachable: a valid session cookie
	var codes []int
	for range 11 {
		codes = append(codes, c.get("/dashboard/").code)
	}
	if codes[0] != http.StatusOK {
		t.Errorf("overview with a valid session cookie behind an SSO proxy's bearer header: %d, want 200 (all 11 loads: %v)", codes[0], codes)
	}

	// The admin API, from the same (proxy's) address, with the right token.
	req, _ := http.NewRequest("GET", srv.URL+"/api/events", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("API with the right token after 11 logged-in dashboard page loads behind the proxy: %d (Retry-After %q), want 200: "+
			"the page loads were charged as wrong admin tokens and locked every operator out", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
}
