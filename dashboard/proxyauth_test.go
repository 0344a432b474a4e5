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

// TestSessionWorksBehindAnAuthenticatingProxy: the admin listener behind a
// proxy that adds its own Authorization header to every request it
// forwards. The operator logs in with the admin token (the form is not
// behind authenticated) and gets a session cookie; the pages must then be
// served, and the proxy's header neither compared nor charged to the
// limiter the API shares, so the right token keeps working on the API from
// the proxy's (every operator's) address.
//
// Regression tests, fixed; this describes the code before the fixes.
// basic (review helper-88): any non-empty Authorization header was taken
// for a bearer attempt before the session cookie was looked at (nginx
// auth_basic, an OAuth2 proxy in basic mode: "Authorization: Basic …").
// Every page was answered 401 "Missing or wrong bearer token.", each load
// charged as a wrong token, and after ten the address got 429 even with the
// right token on the API. sso-bearer (review helper-162): the fix exempted
// other schemes only, and an SSO proxy forwarding the user's identity as a
// bearer (oauth2-proxy --pass-authorization-header, Pomerium, Envoy
// ext_authz) locked everyone out the same way. Now a live session cookie
// decides first (comparing the proxy's bearer as well would give a
// logged-in user an unlimited token oracle).
func TestSessionWorksBehindAnAuthenticatingProxy(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ name, proxyAuth string }{
		{"basic", "Basic b3BlcmF0b3I6cHJveHktcGFzc3dvcmQ="},
		{"sso-bearer", "Bearer eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJvcGVyYXRvckBleGFtcGxlLmNvbSJ9.c2lnbmF0dXJl"},
	} {
		t.Run(c.name, func(t *testing.T) {
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

			cl := &client{t: t, base: srv.URL, header: http.Header{"Authorization": {c.proxyAuth}}}
			cl.login() // the login form is reachable: a valid session cookie
			var codes []int
			for range 11 {
				codes = append(codes, cl.get("/dashboard/").code)
			}
			if codes[0] != http.StatusOK {
				t.Errorf("overview with a valid session cookie behind the proxy's %q: %d, want 200 (all 11 loads: %v)", c.name, codes[0], codes)
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
		})
	}
}
