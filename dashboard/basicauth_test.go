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

// TestSessionWorksBehindABasicAuthProxy (review helper-88).
//
// Defect: dashboard/auth.go, authenticated: any non-empty Authorization
// header is taken for a bearer attempt — `if auth := r.Header.Get(
// "Authorization"); auth != ""` — before the session cookie is looked at.
// A common deployment puts the admin listener behind a reverse proxy that
// asks for HTTP Basic credentials (nginx auth_basic, an OAuth2 proxy in
// basic mode) and forwards the header; the browser then sends
// "Authorization: Basic …" on every request. The operator logs in with the
// token (the form is not behind authenticated) and gets a session cookie,
// but every page is then answered 401 "Missing or wrong bearer token."
// (the valid session is never consulted), and each page load is charged as
// a WRONG TOKEN to the shared AuthLimiter: after ten, the address (the
// proxy's, i.e. every operator's) gets 429 even with the right bearer token
// on the admin API. The real operator locks everyone out just by using the
// dashboard.
//
// Expected: an Authorization header of another scheme is not a bearer
// token: it neither costs an attempt nor hides the session cookie; a
// logged-in operator sees the pages, and the API keeps accepting the right
// token.
func TestSessionWorksBehindABasicAuthProxy(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	// A dashboard on the admin API as cmd/inlet wires it: one limiter for both.
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

	// What the browser sends once the proxy asked for Basic credentials.
	c := &client{t: t, base: srv.URL, header: http.Header{"Authorization": {"Basic b3BlcmF0b3I6cHJveHktcGFzc3dvcmQ="}}}
	c.login() // the form itself is reachable: a session cookie
	var codes []int
	for range 11 {
		codes = append(codes, c.get("/dashboard/").code)
	}
	if codes[0] != http.StatusOK {
		t.Errorf("overview with a valid session cookie and the proxy's Basic header: %d, want 200 (all 11 loads: %v)", codes[0], codes)
	}

	// The API, from the same address, with the right bearer token.
	req, _ := http.NewRequest("GET", srv.URL+"/api/events", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("API with the right token after 11 dashboard page loads behind a Basic-auth proxy: %d (Retry-After %q), want 200: "+
			"the loads were charged as wrong tokens and locked the operator out", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
}
