package admin_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/admin"
)

// TestRequestsWithoutATokenDoNotLockOutTheOperator (review helper-88).
//
// Defect: the admin API's authenticate (admin/api.go, the `!a.tokenOK(r)`
// branch calling end(true)) charges every request that carries NO
// Authorization header at all to the client address's budget of wrong
// tokens. Ten such requests — an operator opening http://admin:8084/ in a
// browser and reloading, a load balancer's or uptime checker's probe of
// "/", a scanner fetching /robots.txt or /.env through the same reverse
// proxy — and the address is refused with 429 even with the right token: the
// real operator (and every script behind the same proxy) is locked out of
// the API and of the dashboard's login, which share the limiter.
//
// A request without a token guesses nothing, so counting it buys no
// protection; the limiter and the docs speak of "wrong tokens" ("attempts
// at the admin token"), and the dashboard itself does not count a request
// without credentials (it redirects to the login form). Expected: only a
// presented Bearer token that is wrong costs an attempt; after any number of
// token-less requests the right token is accepted.
func TestRequestsWithoutATokenDoNotLockOutTheOperator(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := newClock() // frozen: no attempt is earned back during the test
	api, err := admin.NewAPI(admin.APIConfig{Token: apiToken, DB: b.op, Logger: slog.New(slog.DiscardHandler),
		AuthLimiter: admin.NewAuthLimiter(admin.AuthLimit{Now: c.now})})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api.Handler())
	t.Cleanup(srv.Close)

	get := func(path, auth string) *http.Response {
		t.Helper()
		req, err := http.NewRequest("GET", srv.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	// A browser pointed at the listener's root, reloaded; a probe of "/";
	// a scanner: no credentials at all.
	for _, p := range []string{"/", "/", "/", "/favicon.ico", "/robots.txt", "/.env", "/", "/healthz", "/", "/api/events", "/"} {
		if resp := get(p, ""); resp.StatusCode != http.StatusUnauthorized && resp.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("GET %s without a token: %d", p, resp.StatusCode)
		}
	}
	// The operator, from the same address, with the right token.
	resp := get("/api/events", "Bearer "+apiToken)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("right token after 11 token-less requests from the same address: %d (Retry-After %q), want 200: "+
			"requests that present no token were counted as wrong tokens and locked the operator out",
			resp.StatusCode, resp.Header.Get("Retry-After"))
	}
}

// TestReplayUntilManyDaysAgoDoesNotReplayEverything (review helper-88).
//
// Defect: ParseTime (admin/admin.go, the "d" suffix branch:
// now.Add(-time.Duration(n) * 24 * time.Hour)) does not check the product for
// overflow. From 106752 days on, the multiplication wraps and the bound that
// should lie ~292 years in the past lands ~292 years in the FUTURE. So a
// replay `{"handler": H, "until": "106752d"}` — "events received before
// 106752 days ago", i.e. none — re-queues every job of the handler, and a
// list with since=106752d silently returns nothing. The same value in hours
// ("2562048h") is refused by time.ParseDuration as out of range, so only
// the day form misreads it.
//
// Expected: a relative bound counts back from now or is refused (400,
// ErrInvalid); never a time after now. Here: 400, or a replay that
// re-queues nothing.
func TestReplayUntilManyDaysAgoDoesNotReplayEverything(t *testing.T) {
	t.Parallel()
	now := time.Now()
	if got, err := admin.ParseTime("106752d", now); err == nil && got.After(now) {
		t.Errorf("ParseTime(\"106752d\") = %s, after now (%s): a duration back from now must not be in the future",
			got.Format(time.RFC3339), now.Format(time.RFC3339))
	}

	b := setupAPI(t)
	b.subscribe(t, "billing", "stripe", "*", 3)
	id := b.insert(t, event{source: "stripe", id: "evt_review_88", eventType: "invoice.paid", body: []byte(`{}`)})
	b.exec(t, `UPDATE webhook_ingress.jobs SET status = 'completed', completed_at = now() WHERE event_id = $1`, id)

	code, _, body := b.call(t, "POST", "/api/replay", `{"handler": "billing", "until": "106752d"}`)
	if code == http.StatusBadRequest {
		return // refused: fixed
	}
	var res admin.ReplayResult
	if err := json.Unmarshal(body, &res); err != nil || code != http.StatusOK {
		t.Fatalf("replay: %d %s", code, body)
	}
	var status string
	if err := b.super.QueryRow(context.Background(), `SELECT status FROM webhook_ingress.jobs WHERE event_id = $1`, id).Scan(&status); err != nil {
		t.Fatal(err)
	}
	if res.Requeued != 0 || status != "completed" {
		t.Fatalf("replay until 106752 days ago (an event received just now cannot match): requeued %d, job now %q; "+
			"want nothing re-queued (or 400)\n%s", res.Requeued, status, strings.TrimSpace(string(body)))
	}
}
