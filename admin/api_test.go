package admin_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/admin"
)

const apiToken = "admin-api-test-token-0123456789"

type apiBundle struct {
	*testBundle
	base string
}

func setupAPI(t *testing.T) *apiBundle {
	t.Helper()
	b := setup(t)
	// These tests try many wrong tokens from one address on purpose; the
	// limit of wrong tokens has a test of its own.
	lim := admin.NewAuthLimiter(admin.AuthLimit{Failures: 1 << 20})
	api, err := admin.NewAPI(admin.APIConfig{Token: apiToken, DB: b.op, Sources: b.sources, Logger: slog.New(slog.DiscardHandler), AuthLimiter: lim})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api.Handler())
	t.Cleanup(srv.Close)
	return &apiBundle{testBundle: b, base: srv.URL}
}

// call makes a request with the token and returns status, headers and body.
func (b *apiBundle) call(t *testing.T, method, path, body string) (int, http.Header, []byte) {
	t.Helper()
	return b.callAs(t, "Bearer "+apiToken, method, path, body)
}

func (b *apiBundle) callAs(t *testing.T, auth, method, path, body string) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, b.base+path, strings.NewReader(body))
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
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, out
}

// same checks that the API answered 200 with exactly what the function
// returns, as JSON.
func same(t *testing.T, what string, code int, got []byte, want any, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: function: %v", what, err)
	}
	if code != http.StatusOK {
		t.Fatalf("%s: status %d: %s", what, code, got)
	}
	w, _ := json.Marshal(want)
	if !bytes.Equal(bytes.TrimSpace(got), w) {
		t.Fatalf("%s:\n API      %s\n function %s", what, got, w)
	}
}

func TestAdminAPIRequiresTheToken(t *testing.T) {
	t.Parallel()
	b := setupAPI(t)
	for _, auth := range []string{"", "Bearer", "Bearer ", "Bearer wrong-token-of-some-length", "Basic " + apiToken,
		"Bearer " + apiToken + "x", "Bearer " + apiToken[:len(apiToken)-1], apiToken} {
		for _, r := range [][2]string{{"GET", "/api/events"}, {"GET", "/api/events/1/raw"}, {"POST", "/api/replay"}, {"GET", "/nothing"}} {
			code, h, body := b.callAs(t, auth, r[0], r[1], `{"job_id":1}`)
			if code != http.StatusUnauthorized || !strings.HasPrefix(h.Get("WWW-Authenticate"), "Bearer") {
				t.Errorf("%q %s %s: %d %s, want 401", auth, r[0], r[1], code, body)
			}
			if h.Get("X-Content-Type-Options") != "nosniff" {
				t.Errorf("%q %s %s: 401 without X-Content-Type-Options: nosniff", auth, r[0], r[1])
			}
		}
	}
	if code, _, _ := b.callAs(t, "bearer "+apiToken, "GET", "/api/events", ""); code != http.StatusOK {
		t.Fatalf("the scheme is case-insensitive: got %d", code)
	}
	for _, tok := range []string{"", "short", strings.Repeat("x", admin.MinTokenBytes-1)} {
		if _, err := admin.NewAPI(admin.APIConfig{Token: tok, DB: b.op}); err == nil {
			t.Errorf("NewAPI with token %q: no error", tok)
		}
	}
}

func TestAdminAPIEndpointsReturnWhatTheFunctionsReturn(t *testing.T) {
	t.Parallel()
	b := setupAPI(t)
	ctx := context.Background()
	b.subscribe(t, "billing", "stripe", "*", 3)
	ok := b.ingest(t, "stripe", "evt_api_1")
	body := []byte("\x00\x01binary\xff\r\n")
	raw := b.insert(t, event{source: "stripe", id: "evt_api_raw", eventType: "invoice.paid", body: body})
	dead := b.jobID(t, raw, "billing")
	b.deadLetter(t, dead, 2, "permanent")

	code, _, got := b.call(t, "GET", "/api/events?source=stripe&type=invoice.*&since=1h&limit=10", "")
	want, err := admin.ListEvents(ctx, b.op, admin.EventFilter{Provider: "stripe", EventType: "invoice.*", Since: time.Now().Add(-time.Hour), Limit: 10})
	same(t, "GET /api/events", code, got, want, err)
	if len(want.Events) != 2 {
		t.Fatalf("want 2 events, got %+v", want)
	}
	code, _, got = b.call(t, "GET", "/api/events?external_id=evt_api_1", "")
	want, err = admin.ListEvents(ctx, b.op, admin.EventFilter{ExternalEventID: "evt_api_1"})
	same(t, "GET /api/events?external_id", code, got, want, err)

	code, _, got = b.call(t, "GET", "/api/events/"+itoa(raw), "")
	detail, err := admin.GetEvent(ctx, b.op, raw)
	same(t, "GET /api/events/{id}", code, got, detail, err)
	var decoded admin.EventDetail
	if err := json.Unmarshal(got, &decoded); err != nil || !bytes.Equal(decoded.RawBody, body) {
		t.Fatalf("raw_body through JSON: %q, %v", decoded.RawBody, err)
	}

	code, h, got := b.call(t, "GET", "/api/events/"+itoa(raw)+"/raw", "")
	if code != http.StatusOK || !bytes.Equal(got, body) || h.Get("Content-Type") != "application/octet-stream" ||
		h.Get("X-Content-Type-Options") != "nosniff" || h.Get("Cache-Control") != "no-store" {
		t.Fatalf("raw: %d %q %v", code, got, h)
	}

	code, _, got = b.call(t, "GET", "/api/dlq?handler=billing&error_class=permanent", "")
	dl, err := admin.ListDeadLetters(ctx, b.op, admin.DeadLetterFilter{Handler: "billing", ErrorClass: "permanent"})
	same(t, "GET /api/dlq", code, got, dl, err)
	if len(dl.DeadLetters) != 1 {
		t.Fatalf("dead letters = %+v", dl)
	}
	code, _, got = b.call(t, "GET", "/api/dlq/"+itoa(dead), "")
	jd, err := admin.GetJob(ctx, b.op, dead)
	same(t, "GET /api/dlq/{job_id}", code, got, jd, err)

	code, _, got = b.call(t, "POST", "/api/events/verify", `{"since":"1h"}`)
	rep, err := admin.Reverify(ctx, b.op, b.sources, admin.VerifyRequest{Since: time.Now().Add(-time.Hour)})
	same(t, "POST /api/events/verify", code, got, rep, err)
	if rep.Checked != 2 || rep.Failed != 1 || rep.Failures[0].EventID != raw {
		t.Fatalf("verify report = %+v", rep)
	}
	code, _, got = b.call(t, "POST", "/api/events/verify", `{"id":`+itoa(ok)+`}`)
	if code != http.StatusOK || !strings.Contains(string(got), `"failed":0`) {
		t.Fatalf("verify one: %d %s", code, got)
	}

	// Replay: a dry run, then the real one, of the dead letter.
	code, _, got = b.call(t, "POST", "/api/replay", `{"handler":"billing","dead_letters":true,"dry_run":true}`)
	same(t, "POST /api/replay dry run", code, got, admin.ReplayResult{DryRun: true, Requeued: 1}, nil)
	if j := b.job(t, dead); j.Status != "dead_letter" {
		t.Fatalf("dry run changed the job: %+v", j)
	}
	code, _, got = b.call(t, "POST", "/api/replay", `{"job_id":`+itoa(dead)+`}`)
	same(t, "POST /api/replay", code, got, admin.ReplayResult{Requeued: 1}, nil)
	if j := b.job(t, dead); j.Status != "pending" {
		t.Fatalf("replayed job: %+v", j)
	}
	code, _, got = b.call(t, "POST", "/api/replay", `{"handler":"billing","source":"stripe","event_type":"*","since":"1h","dry_run":true}`)
	same(t, "POST /api/replay filter", code, got, admin.ReplayResult{DryRun: true, Requeued: 2}, nil)
}

func TestAdminAPIErrors(t *testing.T) {
	t.Parallel()
	b := setupAPI(t)
	b.subscribe(t, "billing", "stripe", "*", 3)
	ev := b.insert(t, event{source: "stripe", id: "evt_1", eventType: "x", body: []byte("{}")})
	job := b.jobID(t, ev, "billing")
	b.exec(t, `UPDATE webhook_ingress.jobs SET status = 'leased', lease_holder_id = 's', lease_expires_at = now() + interval '1 minute' WHERE id = $1`, job)
	cases := []struct {
		method, path, body string
		code               int
	}{
		{"GET", "/api/events/999999", "", 404},
		{"GET", "/api/events/999999/raw", "", 404},
		{"GET", "/api/events/abc", "", 400},
		{"GET", "/api/events/-1", "", 400},
		{"GET", "/api/events?since=yesterday", "", 400},
		{"GET", "/api/events?limit=5000", "", 400},
		{"GET", "/api/events?before=x", "", 400},
		{"GET", "/api/dlq/999999", "", 404},
		{"GET", "/api/dlq?until=soon", "", 400},
		{"GET", "/api/events?sorce=stripe", "", 400},                // a misspelt filter is not ignored
		{"GET", "/api/events?source=stripe&source=github", "", 400}, // nor is a repeated one
		{"GET", "/api/dlq?handlr=billing", "", 400},
		{"POST", "/api/replay", `{}`, 400},
		{"POST", "/api/replay", `{"handler":"billing"}`, 400},
		{"POST", "/api/replay", `{"job_id":1,"surprise":true}`, 400},
		{"POST", "/api/replay", `not json`, 400},
		{"POST", "/api/replay", `{"job_id":999999}`, 404},
		{"POST", "/api/replay", `{"job_id":` + itoa(job) + `}`, 409},
		{"POST", "/api/replay", `{"handler":"ghost","dead_letters":true}`, 404},
		{"POST", "/api/events/verify", `{}`, 400},
		{"POST", "/api/events/verify", `{"id":999999}`, 404},
		{"GET", "/api/replay", "", 405},
		{"DELETE", "/api/events/1", "", 405},
		{"GET", "/api/nothing", "", 404},
	}
	for _, c := range cases {
		code, h, body := b.call(t, c.method, c.path, c.body)
		if code != c.code {
			t.Errorf("%s %s %s: %d %s, want %d", c.method, c.path, c.body, code, body, c.code)
			continue
		}
		if got := h.Get("X-Content-Type-Options"); got != "nosniff" {
			t.Errorf("%s %s: %d with X-Content-Type-Options %q, want nosniff", c.method, c.path, code, got)
		}
		if c.path == "/api/nothing" {
			continue // the mux's own plain-text 404
		}
		if code != 405 && (h.Get("Content-Type") != "application/json" || !strings.Contains(string(body), `"error":`)) {
			t.Errorf("%s %s: error body %q (%s)", c.method, c.path, body, h.Get("Content-Type"))
		}
	}
}

func TestAdminAPIServesOnItsOwnListener(t *testing.T) {
	t.Parallel()
	b := setup(t)
	api, err := admin.NewAPI(admin.APIConfig{Listen: "127.0.0.1:0", Token: apiToken, DB: b.op, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := api.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest("GET", "http://"+api.Addr()+"/api/dlq", nil)
	req.Header.Set("Authorization", "Bearer "+apiToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := api.Stop(ctx); err != nil {
		t.Fatal(err)
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// The dashboard authenticates its own paths (a login form, a session
// cookie); every other path keeps the bearer token, however it is spelled.
func TestAdminAPIMountsTheDashboard(t *testing.T) {
	t.Parallel()
	b := setup(t)
	dash := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusTeapot)
		_, _ = io.WriteString(w, "dashboard "+r.URL.Path)
	})
	serveAPI := func(d http.Handler) string {
		api, err := admin.NewAPI(admin.APIConfig{Token: apiToken, DB: b.op, Logger: slog.New(slog.DiscardHandler), Dashboard: d})
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(api.Handler())
		t.Cleanup(srv.Close)
		return srv.URL
	}
	withDash := &apiBundle{testBundle: b, base: serveAPI(dash)}
	for _, p := range []string{"/dashboard/", "/dashboard/login", "/dashboard/events/1"} {
		if code, _, body := withDash.callAs(t, "", "GET", p, ""); code != http.StatusTeapot || string(body) != "dashboard "+p {
			t.Errorf("GET %s without a token: %d %s, want the dashboard's answer", p, code, body)
		}
	}
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := noRedirect.Get(withDash.base + "/dashboard")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 3 || resp.Header.Get("Location") != "/dashboard/" {
		t.Errorf("GET /dashboard: %d %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	for _, p := range []string{"/api/events", "/dashboard/../api/events", "/dashboard/%2e%2e/api/events", "/dashboardx", "/"} {
		req, _ := http.NewRequest("GET", withDash.base+p, nil)
		req.URL.Opaque = p // as sent, not cleaned by the client
		resp, err := noRedirect.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("GET %s without a token: %d %s, want 401", p, resp.StatusCode, body)
		}
	}
	if code, _, _ := withDash.call(t, "GET", "/api/events", ""); code != http.StatusOK {
		t.Errorf("GET /api/events with the token: %d", code)
	}
	// Without a dashboard, /dashboard/ is just another path behind the token.
	without := &apiBundle{testBundle: b, base: serveAPI(nil)}
	if code, _, _ := without.callAs(t, "", "GET", "/dashboard/", ""); code != http.StatusUnauthorized {
		t.Errorf("GET /dashboard/ without a dashboard or a token: %d", code)
	}
}
