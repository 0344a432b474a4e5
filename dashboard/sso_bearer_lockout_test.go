package dashboard_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/admin"
	"github.com/inlet-dev/inlet/dashboard"
)

// TestSSOBearerWithoutALiveSessionGoesToTheLoginForm (review helper-227, fixed).
// Defect: the package doc (dashboard/doc.go) and the helper-162 fix say an
// SSO proxy in front "may send its own bearer with every request"; but only
// a LIVE session makes the dashboard ignore that header. Without one (a
// first visit, the 12 h session expired, or any restart of inlet, which
// "logs everyone out"), dashboard/auth.go:authenticated compares the
// proxy's bearer with the admin token: every page is a 401 "Missing or
// wrong bearer token." dead end (never the redirect to the login form the
// doc promises for a browser without a session; the error page's only link
// leads to the same 401), and every load is charged as a wrong admin token
// to the proxy's address, which all operators share. After ten loads that
// address gets 429 on the login form and on the admin API, the right token
// included.
// Setup: an admin API + dashboard sharing one AuthLimiter on a frozen clock
// (as cmd/inlet startAdmin wires them); a browser behind an SSO proxy that
// adds "Authorization: Bearer <ID token>" to each request, holding a
// session cookie of the process before a restart (unknown to this one).
// Expected: a page load without a live session redirects to
// /dashboard/login (303) and costs nothing; after 11 loads the right
// admin token still works on the API (200) and on the login form (303).
// Observed: each load 401; after 11 loads the API answers 429
// (Retry-After 6) with the right token, and the login form 429.
// Fixed: authenticated compares a bearer only on a script's request: one
// that carries a dashboard cookie (stale) or is a browser navigation
// (Sec-Fetch-Mode: navigate / Sec-Fetch-Dest: document) goes as one
// without a session (a GET to the login form, anything else 401), the
// bearer neither compared (no oracle) nor charged; a 401 page links to
// /dashboard/login. A script's bearer (no cookie, no Sec-Fetch) is
// compared and charged as before (TestScriptBearerStillCompared).
func TestSSOBearerWithoutALiveSessionGoesToTheLoginForm(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
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

	// A session cookie of the process before the restart: well formed,
	// unknown here.
	before := b.client(t)
	before.login()
	const sso = "Bearer eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJvcGVyYXRvckBleGFtcGxlLmNvbSJ9.c2lnbmF0dXJl"
	cl := &client{t: t, base: srv.URL, cookie: before.cookie, header: http.Header{
		"Authorization":  {sso},
		"Sec-Fetch-Mode": {"navigate"},
		"Sec-Fetch-Dest": {"document"},
		"Sec-Fetch-Site": {"none"},
	}}
	var codes []int
	for range 11 {
		codes = append(codes, cl.get("/dashboard/").code)
	}
	first := cl.get("/dashboard/events")
	if first.code != http.StatusSeeOther {
		t.Errorf("page load behind the SSO proxy without a live session: %d (Location %q), want 303 to /dashboard/login (the 11 loads before: %v)",
			first.code, first.header.Get("Location"), codes)
	}

	req, _ := http.NewRequest("GET", srv.URL+"/api/events", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("admin API with the right token after 12 dashboard loads behind the SSO proxy: %d (Retry-After %q), want 200: "+
			"the proxy's bearer was charged as a wrong admin token on every load", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	login := &client{t: t, base: srv.URL, header: http.Header{"Authorization": {sso}}}
	if r := login.do("POST", "/dashboard/login", map[string][]string{"token": {token}, "next": {"/dashboard/"}}, login.sameOrigin()); r.code != http.StatusSeeOther {
		t.Errorf("login form with the right token from the proxy's address afterwards: %d (Retry-After %q), want 303", r.code, r.header.Get("Retry-After"))
	}
}

// TestEventPageSaysReceivedEarlierForAProviderTimeAhead (review helper-227, fixed).
// Defect: the event page's Occurred line reads "(the provider's time;
// received D later)" with D = |received_at - occurred_at|
// (dashboard/templates/event.html: duration ($e.ReceivedAt.Sub
// $e.OccurredAt), and humanDuration drops the sign). Ingress stores an
// occurred_at up to 24 h ahead of now (ingress/verify/occurred.go,
// occurredAhead), as a provider whose clock runs ahead sends it; for such
// an event the page says it was received D later when it was received D
// EARLIER: an operator chasing delivery latency or a provider's clock skew
// reads the opposite of the stored data.
// Setup: an event received at T with occurred_at T+90s (a provider clock
// 90 s ahead).
// Expected: the page does not claim "received 1m30s later" (e.g. "received
// 1m30s before the provider's time").
// Observed: "(the provider's time; received 1m30s later)".
// Fixed: event.html branches on $e.OccurredAt.After $e.ReceivedAt and then
// says "received 1m30s earlier: the provider's clock runs ahead of ours".
func TestEventPageSaysReceivedEarlierForAProviderTimeAhead(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	received := b.now.Add(-time.Hour)
	var ev int64
	if err := b.super.QueryRow(context.Background(), `INSERT INTO webhook_ingress.events
		(provider, scheme, external_event_id, event_type, received_at, occurred_at, headers, request_uri, raw_body, signature_verified)
		VALUES ('stripe', 'stripe', 'evt_clock_ahead', 'invoice.paid', $1, $2, '{}', '/webhooks/stripe', '{}', true) RETURNING id`,
		received, received.Add(90*time.Second)).Scan(&ev); err != nil {
		t.Fatal(err)
	}
	c := b.client(t)
	c.login()
	r := c.get(fmt.Sprintf("/dashboard/events/%d", ev))
	if r.code != http.StatusOK {
		t.Fatalf("event page: %d\n%s", r.code, r.body)
	}
	if strings.Contains(r.body, "received 1m30s later") {
		t.Errorf("event received 90 s BEFORE its provider's time: the page says %q", "received 1m30s later")
	}
	if !strings.Contains(r.body, "received 1m30s earlier") {
		t.Errorf("event received 90 s before its provider's time: the page does not say %q", "received 1m30s earlier")
	}
}

// TestScriptBearerStillCompared: the other side of
// TestSSOBearerWithoutALiveSessionGoesToTheLoginForm. A script (curl with
// the admin token as a bearer, no cookie, no Sec-Fetch headers) keeps using
// the dashboard; a wrong bearer from one is still an attempt, charged (10,
// then 429), never a free oracle. A browser navigation or a stale cookie
// is not a script: its bearer is not read, whatever it is, and a POST
// without a session is a 401 whose page links to the login form.
func TestScriptBearerStillCompared(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
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

	script := &client{t: t, base: srv.URL, header: http.Header{"Authorization": {"Bearer " + token}}}
	if r := script.get("/dashboard/events"); r.code != http.StatusOK {
		t.Errorf("a script's right bearer: %d, want 200", r.code)
	}

	// A navigation or a stale cookie: not read, so not compared, even when
	// it is the admin token (a browser cannot send a bearer itself).
	stale := b.client(t)
	stale.login() // another process's session
	for name, c := range map[string]*client{
		"navigate": {t: t, base: srv.URL, header: http.Header{"Authorization": {"Bearer " + token}, "Sec-Fetch-Mode": {"navigate"}}},
		"document": {t: t, base: srv.URL, header: http.Header{"Authorization": {"Bearer wrong-0123456789"}, "Sec-Fetch-Dest": {"document"}}},
		"stale":    {t: t, base: srv.URL, cookie: stale.cookie, header: http.Header{"Authorization": {"Bearer wrong-0123456789"}}},
	} {
		for range 11 {
			if r := c.get("/dashboard/"); r.code != http.StatusSeeOther || !strings.HasPrefix(r.header.Get("Location"), "/dashboard/login?next=") {
				t.Fatalf("%s: GET with a bearer and no live session: %d (Location %q), want 303 to the login form", name, r.code, r.header.Get("Location"))
			}
		}
		r := c.do("POST", "/dashboard/replay", url.Values{"job_id": {"1"}}, http.Header{"Origin": {srv.URL}, "Sec-Fetch-Site": {"same-origin"}})
		if r.code != http.StatusUnauthorized || !strings.Contains(r.body, `href="/dashboard/login"`) || r.header.Get("WWW-Authenticate") != "" {
			t.Errorf("%s: POST with a bearer and no live session: %d (WWW-Authenticate %q), want 401 linking to the login form\n%s",
				name, r.code, r.header.Get("WWW-Authenticate"), r.body)
		}
	}
	if r := script.get("/dashboard/"); r.code != http.StatusOK {
		t.Fatalf("a script's right bearer after the browsers' loads: %d, want 200 (they were charged)", r.code)
	}

	// A script's wrong bearer: 401 (linking to the login form), charged.
	wrong := &client{t: t, base: srv.URL, header: http.Header{"Authorization": {"Bearer wrong-0123456789"}}}
	var codes []int
	for range 11 {
		r := wrong.get("/dashboard/")
		codes = append(codes, r.code)
		if r.code == http.StatusUnauthorized && !strings.Contains(r.body, `href="/dashboard/login"`) {
			t.Errorf("401 page without a link to the login form:\n%s", r.body)
		}
	}
	if codes[0] != http.StatusUnauthorized || codes[10] != http.StatusTooManyRequests {
		t.Errorf("a script's wrong bearer, 11 times: %v, want 401 ten times, then 429", codes)
	}
}
