package dashboard_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inlet-dev/inlet/admin"
	"github.com/inlet-dev/inlet/dashboard"
	"github.com/inlet-dev/inlet/internal/database"
	"github.com/inlet-dev/inlet/internal/pgtest"
	"github.com/inlet-dev/inlet/schema"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

const token = "dashboard-test-token-0123456789"

// testBundle is a dashboard mounted on the admin API, served over HTTP.
type testBundle struct {
	super *pgxpool.Pool // setup and inspection only
	op    *pgxpool.Pool // webhook_operator, as the dashboard runs
	base  string
	now   time.Time
	// skew moves the server's clock ahead of now (nanoseconds).
	skew atomic.Int64
}

type options struct {
	now     time.Time // zero: now, to the second
	silence dashboard.Silence
	sources []string
}

func setup(t *testing.T, opts options) *testBundle {
	t.Helper()
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	super, err := database.Open(ctx, url, database.Options{MaxConns: 4, AppName: "dashboard-test-super"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(super.Close)
	op, err := database.Open(ctx, url, database.Options{Role: schema.OperatorRole, MaxConns: 4, AppName: "dashboard-test-operator"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(op.Close)
	b := &testBundle{super: super, op: op, now: opts.now}
	if b.now.IsZero() {
		b.now = time.Now().Truncate(time.Second)
	}
	if opts.sources == nil {
		opts.sources = []string{"stripe", "github", "acme"}
	}
	b.base = serve(t, op, opts, func() time.Time { return b.now.Add(time.Duration(b.skew.Load())) })
	return b
}

// serve mounts a dashboard over db on an admin API and returns its URL.
func serve(t *testing.T, db admin.DB, opts options, now func() time.Time) string {
	t.Helper()
	log := slog.New(slog.DiscardHandler)
	d, err := dashboard.New(dashboard.Config{DB: db, Token: token, Sources: opts.sources, Silence: opts.silence, Logger: log, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	api, err := admin.NewAPI(admin.APIConfig{Token: token, DB: db, Logger: log, Dashboard: d})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api.Handler())
	t.Cleanup(srv.Close)
	return srv.URL
}

func (b *testBundle) exec(t *testing.T, sql string, args ...any) {
	t.Helper()
	if _, err := b.super.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func (b *testBundle) subscribe(t *testing.T, handler, provider string) {
	t.Helper()
	b.exec(t, `INSERT INTO webhook_ingress.subscriptions (handler, provider_pattern, max_attempts) VALUES ($1, $2, 3)`, handler, provider)
}

// insert stores an event as ingress would (the trigger makes its jobs).
func (b *testBundle) insert(t *testing.T, source, id string, body []byte, received time.Time) int64 {
	t.Helper()
	hdr, _ := json.Marshal(http.Header{"Content-Type": {"application/json"}, "X-Test": {`<b>"quoted"</b>`}})
	var eid int64
	err := b.super.QueryRow(context.Background(), `INSERT INTO webhook_ingress.events
		(provider, scheme, external_event_id, event_type, received_at, headers, request_uri, raw_body, signature_verified, secret_index)
		VALUES ($1, $1, $2, 'test.event', $3, $4, '/webhooks/' || $1, $5, true, 0) RETURNING id`,
		source, id, received, hdr, body).Scan(&eid)
	if err != nil {
		t.Fatalf("insert event %s: %v", id, err)
	}
	return eid
}

func (b *testBundle) jobID(t *testing.T, eventID int64, handler string) int64 {
	t.Helper()
	var id int64
	if err := b.super.QueryRow(context.Background(), `SELECT id FROM webhook_ingress.jobs WHERE event_id = $1 AND handler = $2`,
		eventID, handler).Scan(&id); err != nil {
		t.Fatalf("job of event %d for %s: %v", eventID, handler, err)
	}
	return id
}

// attempt records a finished attempt of job that ended at finished.
func (b *testBundle) attempt(t *testing.T, job int64, n int, outcome string, finished time.Time) {
	t.Helper()
	b.exec(t, `INSERT INTO webhook_ingress.job_attempts (job_id, event_received_at, attempt, worker_id, started_at, finished_at, outcome, error_class, error)
		SELECT id, event_received_at, $2, 'w1', $4::timestamptz - interval '20 milliseconds', $4, $3,
		       CASE WHEN $3 IN ('failed', 'dead_letter') THEN 'http_5xx' END, CASE WHEN $3 IN ('failed', 'dead_letter') THEN 'upstream <em>said</em> no' END
		FROM webhook_ingress.jobs WHERE id = $1`, job, n, outcome, finished)
}

// complete makes job completed at finished with its successful attempt on
// the job row, as consumers record it (010_lease_token): no history row.
func (b *testBundle) complete(t *testing.T, job int64, finished time.Time) {
	t.Helper()
	b.exec(t, `UPDATE webhook_ingress.jobs SET status = 'completed', attempt_count = 1, worker_id = 'w1',
		attempted_at = $2::timestamptz - interval '20 milliseconds', completed_at = $2,
		completed_attempt_id = nextval('webhook_ingress.job_attempts_id_seq') WHERE id = $1`, job, finished)
}

// eventID is the id of the event with external id ext.
func (b *testBundle) eventID(t *testing.T, ext string) int64 {
	t.Helper()
	var id int64
	if err := b.super.QueryRow(context.Background(), `SELECT id FROM webhook_ingress.events WHERE external_event_id = $1`, ext).Scan(&id); err != nil {
		t.Fatalf("event %s: %v", ext, err)
	}
	return id
}

func (b *testBundle) deadLetter(t *testing.T, job int64) {
	t.Helper()
	b.attempt(t, job, 1, "dead_letter", b.now.Add(-time.Minute))
	b.exec(t, `UPDATE webhook_ingress.jobs SET status = 'dead_letter', attempt_count = 1, last_error = 'upstream said no',
		last_error_class = 'http_5xx', worker_id = 'w1', updated_at = now() WHERE id = $1`, job)
}

func (b *testBundle) status(t *testing.T, job int64) string {
	t.Helper()
	var s string
	if err := b.super.QueryRow(context.Background(), `SELECT status FROM webhook_ingress.jobs WHERE id = $1`, job).Scan(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

// client is a browser stand-in: it keeps the session cookie and does not
// follow redirects, so tests see them.
type client struct {
	t      *testing.T
	base   string
	cookie *http.Cookie
	// header is added to every request.
	header http.Header
}

func (b *testBundle) client(t *testing.T) *client {
	return &client{t: t, base: b.base, header: http.Header{}}
}

type response struct {
	code   int
	header http.Header
	body   string
}

func (c *client) do(method, path string, form url.Values, extra http.Header) response {
	c.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, c.base+path, body)
	if err != nil {
		c.t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for k, v := range c.header {
		req.Header[k] = v
	}
	for k, v := range extra {
		req.Header[k] = v
	}
	if c.cookie != nil {
		req.AddCookie(c.cookie)
	}
	hc := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := hc.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return response{code: resp.StatusCode, header: resp.Header, body: string(out)}
}

func (c *client) get(path string) response { c.t.Helper(); return c.do("GET", path, nil, nil) }

// sameOrigin is what a browser sends with a form it posts to the dashboard.
func (c *client) sameOrigin() http.Header {
	return http.Header{"Origin": {c.base}, "Sec-Fetch-Site": {"same-origin"}}
}

// login posts the token through the form and keeps the session cookie.
func (c *client) login() {
	c.t.Helper()
	r := c.do("POST", "/dashboard/login", url.Values{"token": {token}, "next": {"/dashboard/"}}, c.sameOrigin())
	if r.code != http.StatusSeeOther || r.header.Get("Location") != "/dashboard/" {
		c.t.Fatalf("login: %d %s\n%s", r.code, r.header.Get("Location"), r.body)
	}
	cookies := (&http.Response{Header: r.header}).Cookies()
	if len(cookies) != 1 {
		c.t.Fatalf("login set %d cookies", len(cookies))
	}
	c.cookie = &http.Cookie{Name: cookies[0].Name, Value: cookies[0].Value}
}

var csrfInput = regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`)

// csrf is the form token of the page at path.
func (c *client) csrf(path string) string {
	c.t.Helper()
	r := c.get(path)
	m := csrfInput.FindStringSubmatch(r.body)
	if r.code != http.StatusOK || m == nil {
		c.t.Fatalf("GET %s: %d, no csrf token\n%s", path, r.code, r.body)
	}
	return m[1]
}

func TestDashboardRequiresLogin(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	c := b.client(t)

	// Without a session: pages redirect to the form, posts are refused.
	for _, p := range []string{"/dashboard/", "/dashboard/events", "/dashboard/events/1", "/dashboard/nothing"} {
		r := c.get(p)
		if r.code != http.StatusSeeOther || r.header.Get("Location") != "/dashboard/login?next="+url.QueryEscape(p) {
			t.Errorf("GET %s without a session: %d %q", p, r.code, r.header.Get("Location"))
		}
	}
	if r := c.do("POST", "/dashboard/replay", url.Values{"job_id": {"1"}}, c.sameOrigin()); r.code != http.StatusUnauthorized {
		t.Errorf("POST replay without a session: %d", r.code)
	}
	if r := c.get("/dashboard"); r.code/100 != 3 || r.header.Get("Location") != "/dashboard/" {
		t.Errorf("GET /dashboard: %d %q", r.code, r.header.Get("Location"))
	}

	// The form and its stylesheet need no session, and say nothing of the token.
	r := c.get("/dashboard/login?next=/dashboard/events")
	if r.code != http.StatusOK || !strings.Contains(r.body, `name="token"`) || !strings.Contains(r.body, `value="/dashboard/events"`) {
		t.Fatalf("login form: %d\n%s", r.code, r.body)
	}
	if r := c.get("/dashboard/static/dashboard.css"); r.code != http.StatusOK || !strings.HasPrefix(r.header.Get("Content-Type"), "text/css") {
		t.Fatalf("stylesheet: %d %s", r.code, r.header.Get("Content-Type"))
	}
	// Security headers on every page.
	for _, h := range []struct{ name, want string }{
		{"Content-Security-Policy", "default-src 'none'"},
		{"Content-Security-Policy", "style-src 'self'"},
		{"Content-Security-Policy", "form-action 'self'"},
		{"Content-Security-Policy", "img-src 'self' data:"},
		{"X-Content-Type-Options", "nosniff"},
		{"X-Frame-Options", "DENY"},
	} {
		if got := r.header.Get(h.name); !strings.Contains(got, h.want) {
			t.Errorf("%s = %q, want %q in it", h.name, got, h.want)
		}
	}
	if strings.Contains(r.header.Get("Content-Security-Policy"), "script-src") {
		t.Errorf("CSP allows scripts: %s", r.header.Get("Content-Security-Policy"))
	}

	// A wrong token: 401, the form again, no cookie.
	for _, tok := range []string{"", "wrong", token + "x", token[:len(token)-1]} {
		r := c.do("POST", "/dashboard/login", url.Values{"token": {tok}}, c.sameOrigin())
		if r.code != http.StatusUnauthorized || !strings.Contains(r.body, "Wrong token") || r.header.Get("Set-Cookie") != "" {
			t.Errorf("login with %q: %d, cookie %q", tok, r.code, r.header.Get("Set-Cookie"))
		}
	}
	// A login from another site is refused.
	if r := c.do("POST", "/dashboard/login", url.Values{"token": {token}}, http.Header{"Origin": {"https://evil.example"}}); r.code != http.StatusForbidden ||
		r.header.Get("Set-Cookie") != "" {
		t.Errorf("cross-site login: %d", r.code)
	}
	// next never leaves the dashboard.
	for _, next := range []string{"https://evil.example/", "//evil.example/dashboard/", "/api/events", `/\evil.example`} {
		r := c.do("POST", "/dashboard/login", url.Values{"token": {token}, "next": {next}}, c.sameOrigin())
		if r.code != http.StatusSeeOther || r.header.Get("Location") != "/dashboard/" {
			t.Errorf("login with next %q: %d to %q", next, r.code, r.header.Get("Location"))
		}
	}

	// The right token: a session cookie that is not the token.
	r = c.do("POST", "/dashboard/login", url.Values{"token": {token}, "next": {"/dashboard/events?source=stripe"}}, c.sameOrigin())
	if r.code != http.StatusSeeOther || r.header.Get("Location") != "/dashboard/events?source=stripe" {
		t.Fatalf("login: %d %q", r.code, r.header.Get("Location"))
	}
	set := r.header.Get("Set-Cookie")
	for _, want := range []string{"inlet_dashboard=", "Path=/dashboard/", "HttpOnly", "SameSite=Strict"} {
		if !strings.Contains(set, want) {
			t.Errorf("Set-Cookie %q lacks %q", set, want)
		}
	}
	if strings.Contains(set, "Secure") {
		t.Errorf("Secure on a plain-HTTP cookie would never come back: %q", set)
	}
	cookie := (&http.Response{Header: r.header}).Cookies()[0]
	if strings.Contains(cookie.Value, token) || len(cookie.Value) < 40 {
		t.Fatalf("cookie value %q", cookie.Value)
	}
	c.cookie = &http.Cookie{Name: cookie.Name, Value: cookie.Value}
	if r := c.get("/dashboard/"); r.code != http.StatusOK || !strings.Contains(r.body, "Log out") {
		t.Fatalf("overview with the cookie: %d\n%s", r.code, r.body)
	}
	if r := c.get("/dashboard/nothing"); r.code != http.StatusNotFound {
		t.Errorf("unknown page with the cookie: %d", r.code)
	}
	// The cookie is the dashboard's only: the API stays bearer-only.
	if r := c.get("/api/events"); r.code != http.StatusUnauthorized {
		t.Errorf("API with the dashboard cookie: %d", r.code)
	}
	// A forged or altered cookie is no session.
	// (The first character is changed: it carries six bits of the id, so the
	// forged value always names another id. Replacing the last two with "AA"
	// was the same cookie about once in a thousand runs.)
	alter := "A"
	if cookie.Value[0] == 'A' {
		alter = "B"
	}
	forged := &client{t: t, base: b.base, header: http.Header{}, cookie: &http.Cookie{Name: cookie.Name, Value: alter + cookie.Value[1:]}}
	if r := forged.get("/dashboard/"); r.code != http.StatusSeeOther {
		t.Errorf("forged cookie: %d", r.code)
	}

	// The bearer header works too; a wrong one is a 401, not a redirect.
	bearer := &client{t: t, base: b.base, header: http.Header{"Authorization": {"Bearer " + token}}}
	if r := bearer.get("/dashboard/"); r.code != http.StatusOK || strings.Contains(r.body, "Log out") {
		t.Errorf("overview with the bearer token: %d", r.code)
	}
	wrong := &client{t: t, base: b.base, header: http.Header{"Authorization": {"Bearer not-the-token-at-all-0123"}}}
	if r := wrong.get("/dashboard/"); r.code != http.StatusUnauthorized || !strings.HasPrefix(r.header.Get("WWW-Authenticate"), "Bearer") {
		t.Errorf("overview with a wrong bearer token: %d", r.code)
	}

	// Logging out ends the session, on the server too.
	if r := c.do("POST", "/dashboard/logout", url.Values{"csrf": {c.csrf("/dashboard/")}}, c.sameOrigin()); r.code != http.StatusSeeOther ||
		!strings.Contains(r.header.Get("Set-Cookie"), "Max-Age=0") {
		t.Fatalf("logout: %d %q", r.code, r.header.Get("Set-Cookie"))
	}
	if r := c.get("/dashboard/"); r.code != http.StatusSeeOther {
		t.Errorf("old cookie after logout: %d", r.code)
	}
}

func TestDashboardSessionExpires(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	c := b.client(t)
	c.login()
	if r := c.get("/dashboard/"); r.code != http.StatusOK {
		t.Fatalf("fresh session: %d", r.code)
	}
	b.skew.Store(int64(13 * time.Hour))
	if r := c.get("/dashboard/"); r.code != http.StatusSeeOther {
		t.Fatalf("session after 13h: %d", r.code)
	}
}

func TestDashboardReplayIsCSRFProtected(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	b.subscribe(t, "billing", "stripe")
	ev := b.insert(t, "stripe", "evt_dead", []byte(`{"id":"evt_dead"}`), b.now.Add(-time.Hour))
	job := b.jobID(t, ev, "billing")
	b.deadLetter(t, job)

	c := b.client(t)
	c.login()
	overview := c.get("/dashboard/")
	if !strings.Contains(overview.body, fmt.Sprintf(`data-job-id="%d"`, job)) || !strings.Contains(overview.body, ">Replay</button>") {
		t.Fatalf("overview lacks the dead letter's replay button:\n%s", overview.body)
	}
	eventPage := c.get(fmt.Sprintf("/dashboard/events/%d", ev)).body
	if !strings.Contains(eventPage, fmt.Sprintf(`class="replay" data-job-id="%d"`, job)) ||
		!strings.Contains(eventPage, fmt.Sprintf(`name="return" value="/dashboard/events/%d"`, ev)) {
		t.Fatalf("the event page lacks the dead letter's replay button:\n%s", eventPage)
	}
	csrf := c.csrf("/dashboard/")
	form := func(tok string) url.Values {
		return url.Values{"job_id": {fmt.Sprint(job)}, "csrf": {tok}, "return": {"/dashboard/"}}
	}
	for _, tc := range []struct {
		name   string
		form   url.Values
		header http.Header
	}{
		{"no csrf token", url.Values{"job_id": {fmt.Sprint(job)}}, c.sameOrigin()},
		{"wrong csrf token", form(strings.Repeat("0", len(csrf))), c.sameOrigin()},
		{"another origin", form(csrf), http.Header{"Origin": {"https://evil.example"}}},
		{"cross-site fetch", form(csrf), http.Header{"Sec-Fetch-Site": {"cross-site"}}},
	} {
		if r := c.do("POST", "/dashboard/replay", tc.form, tc.header); r.code != http.StatusForbidden {
			t.Errorf("%s: %d", tc.name, r.code)
		}
		if s := b.status(t, job); s != "dead_letter" {
			t.Fatalf("%s: the job is %s", tc.name, s)
		}
	}
	// Another session's token is not this session's.
	other := b.client(t)
	other.login()
	if r := c.do("POST", "/dashboard/replay", form(other.csrf("/dashboard/")), c.sameOrigin()); r.code != http.StatusForbidden {
		t.Errorf("another session's csrf token: %d", r.code)
	}

	// From the page itself: re-queued, back to the overview with a message.
	r := c.do("POST", "/dashboard/replay", form(csrf), c.sameOrigin())
	if r.code != http.StatusSeeOther || r.header.Get("Location") != "/dashboard/" {
		t.Fatalf("replay: %d %q\n%s", r.code, r.header.Get("Location"), r.body)
	}
	if s := b.status(t, job); s != "pending" {
		t.Fatalf("after replay the job is %s, want pending", s)
	}
	page := c.get("/dashboard/")
	if !strings.Contains(page.body, fmt.Sprintf("Job %d re-queued.", job)) {
		t.Fatalf("no flash message after replay:\n%s", page.body)
	}
	if strings.Contains(page.body, fmt.Sprintf(`<tr class="dead-letter" data-job-id="%d"`, job)) {
		t.Fatalf("the replayed job is still listed as a dead letter")
	}
	if strings.Contains(c.get("/dashboard/").body, "re-queued.") {
		t.Fatal("the flash message showed twice")
	}
	// Errors come back as a message, not a broken page.
	if r := c.do("POST", "/dashboard/replay", url.Values{"job_id": {"999999"}, "csrf": {csrf}}, c.sameOrigin()); r.code != http.StatusSeeOther {
		t.Fatalf("replay of an unknown job: %d", r.code)
	}
	if body := c.get("/dashboard/").body; !strings.Contains(body, "Not replayed") || !strings.Contains(body, "no such job") {
		t.Fatalf("no error message for an unknown job:\n%s", body)
	}
	if r := c.do("POST", "/dashboard/replay", url.Values{"job_id": {"x"}, "csrf": {csrf}}, c.sameOrigin()); r.code != http.StatusBadRequest {
		t.Fatalf("replay of job x: %d", r.code)
	}

	// From the event page: back to it.
	b.deadLetter(t, job)
	ret := fmt.Sprintf("/dashboard/events/%d", ev)
	if r := c.do("POST", "/dashboard/replay", url.Values{"job_id": {fmt.Sprint(job)}, "csrf": {csrf}, "return": {ret}}, c.sameOrigin()); r.code != http.StatusSeeOther ||
		r.header.Get("Location") != ret || b.status(t, job) != "pending" {
		t.Fatalf("replay from the event page: %d to %q, job %s", r.code, r.header.Get("Location"), b.status(t, job))
	}

	// A bearer request needs no CSRF token: no browser sends one cross-site.
	b.deadLetter(t, job)
	bearer := &client{t: t, base: b.base, header: http.Header{"Authorization": {"Bearer " + token}}}
	if r := bearer.do("POST", "/dashboard/replay", url.Values{"job_id": {fmt.Sprint(job)}}, nil); r.code != http.StatusSeeOther || b.status(t, job) != "pending" {
		t.Fatalf("bearer replay: %d, job %s", r.code, b.status(t, job))
	}
}

func TestDashboardEventPageShowsTheBodyAsText(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	b.subscribe(t, "billing", "stripe")
	script := `{"note":"<script>alert(1)</script>","amp":"a&b"}`
	ev := b.insert(t, "stripe", "evt_script", []byte(script), b.now.Add(-time.Minute))
	job := b.jobID(t, ev, "billing")
	b.attempt(t, job, 1, "failed", b.now.Add(-30*time.Second))
	binary := b.insert(t, "stripe", "evt_binary", []byte("\x00\x01\xffbin\xfe"), b.now.Add(-time.Minute))

	c := b.client(t)
	c.login()
	r := c.get(fmt.Sprintf("/dashboard/events/%d", ev))
	if r.code != http.StatusOK {
		t.Fatalf("event page: %d\n%s", r.code, r.body)
	}
	if strings.Contains(r.body, "<script>") || strings.Contains(r.body, "<em>") || strings.Contains(r.body, `<b>"quoted"`) {
		t.Fatalf("the page carries markup from the event:\n%s", r.body)
	}
	for _, want := range []string{
		`&lt;script&gt;alert(1)&lt;/script&gt;`, // the body, as text
		`a&amp;b`,
		`<pre class="body" id="event-body">`,
		`evt_script`,
		`X-Test`, `&lt;b&gt;&#34;quoted&#34;&lt;/b&gt;`, // a header value, as text
		`billing`, `upstream &lt;em&gt;said&lt;/em&gt; no`, // the job's attempt with its error
		`data-status="pending"`,
	} {
		if !strings.Contains(r.body, want) {
			t.Errorf("event page lacks %s", want)
		}
	}
	if strings.Contains(r.body, `class="replay"`) {
		t.Errorf("a replay button for a pending job")
	}
	if r := c.get(fmt.Sprintf("/dashboard/events/%d", binary)); r.code != http.StatusOK ||
		!strings.Contains(r.body, "not UTF-8") || !strings.Contains(r.body, "00 01 ff 62 69 6e fe") {
		t.Fatalf("binary body: %d\n%s", r.code, r.body)
	}
	for _, p := range []string{"/dashboard/events/999999", "/dashboard/events/abc", "/dashboard/events/-1", "/dashboard/events/0"} {
		if r := c.get(p); r.code != http.StatusNotFound || !strings.Contains(r.body, "404") {
			t.Errorf("GET %s: %d", p, r.code)
		}
	}
	if r := c.get("/dashboard/events?before=x"); r.code != http.StatusBadRequest {
		t.Errorf("events?before=x: %d", r.code)
	}
	if r := c.get("/dashboard/events?source=stripe"); r.code != http.StatusOK || !strings.Contains(r.body, "evt_binary") {
		t.Errorf("events list: %d", r.code)
	}
}

var (
	seriesRE  = regexp.MustCompile(`<g class="series" data-source="([^"]+)" data-total="(\d+)">`)
	handlerRE = regexp.MustCompile(`(?s)<tr class="handler" data-handler="([^"]+)">.*?data-lag-seconds="([^"]*)".*?data-failure-rate="([^"]+)" data-attempts="(\d+)" data-failures="(\d+)"`)
)

func TestDashboardOverviewPlotsRatesAndHandlerStats(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	b.subscribe(t, "billing", "stripe")
	b.subscribe(t, "audit", "*")
	// stripe: three events, two in the current hour; github: one 5h ago;
	// acme: none; legacy (not configured): one; one stripe event older than
	// the window.
	hour := b.now.Truncate(time.Hour)
	e1 := b.insert(t, "stripe", "evt_1", []byte(`{}`), hour.Add(time.Second))
	e2 := b.insert(t, "stripe", "evt_2", []byte(`{}`), hour.Add(2*time.Second))
	b.insert(t, "stripe", "evt_3", []byte(`{}`), hour.Add(-3*time.Hour))
	b.insert(t, "stripe", "evt_old", []byte(`{}`), hour.Add(-30*time.Hour))
	b.insert(t, "github", "gh_1", []byte(`{}`), hour.Add(-5*time.Hour))
	b.insert(t, "legacy", "lg_1", []byte(`{}`), hour.Add(-2*time.Hour))

	// billing: one job due 10 minutes ago (its lag), one due in the future;
	// attempts in the last hour: 2 completed, 1 failed, 1 dead letter
	// (failure rate 50%); an older failure, an older success and a replay
	// marker do not count. One success is on its job row (how consumers
	// record it), the other a job_attempts row (archived by a replay of the
	// due job).
	due := b.jobID(t, e1, "billing")
	later := b.jobID(t, e2, "billing")
	b.exec(t, `UPDATE webhook_ingress.jobs SET next_attempt_at = $2 WHERE id = $1`, due, b.now.Add(-10*time.Minute))
	b.exec(t, `UPDATE webhook_ingress.jobs SET status = 'failed', next_attempt_at = $2 WHERE id = $1`, later, b.now.Add(time.Hour))
	b.attempt(t, due, 1, "completed", b.now.Add(-5*time.Minute))
	b.complete(t, b.jobID(t, b.eventID(t, "evt_3"), "billing"), b.now.Add(-4*time.Minute))
	b.complete(t, b.jobID(t, b.eventID(t, "evt_old"), "billing"), b.now.Add(-2*time.Hour))
	b.attempt(t, later, 1, "failed", b.now.Add(-3*time.Minute))
	b.attempt(t, later, 2, "dead_letter", b.now.Add(-2*time.Minute))
	b.attempt(t, later, 3, "failed", b.now.Add(-2*time.Hour))
	b.exec(t, `INSERT INTO webhook_ingress.job_attempts (job_id, event_received_at, attempt, worker_id, started_at, finished_at, outcome)
		SELECT id, event_received_at, 0, 'operator', $2, $2, 'replayed' FROM webhook_ingress.jobs WHERE id = $1`, later, b.now.Add(-time.Minute))
	// audit: every job completed, none due, none in the last hour.
	b.exec(t, `UPDATE webhook_ingress.jobs SET status = 'completed', completed_at = $1::timestamptz - interval '2 hours',
		completed_attempt_id = nextval('webhook_ingress.job_attempts_id_seq') WHERE handler = 'audit'`, b.now)

	// billing's consumer set a rate limit and a breaker, whose circuit is open.
	b.exec(t, `INSERT INTO webhook_ingress.handler_limits (handler, rate_per_second, burst, breaker_failures, breaker_probe_interval, circuit)
		VALUES ('billing', 5, 5, 3, '30s', 'open')`)

	c := b.client(t)
	c.login()
	r := c.get("/dashboard/")
	if r.code != http.StatusOK {
		t.Fatalf("overview: %d\n%s", r.code, r.body)
	}
	if !strings.Contains(r.body, `<td class="circuit bad" data-circuit="open">5/s · circuit open</td>`) ||
		!strings.Contains(r.body, `data-circuit=""><span class="muted">—</span></td>`) {
		t.Errorf("handler limits and circuit not shown (billing: 5/s, open; audit: none)")
	}
	var got []string
	for _, m := range seriesRE.FindAllStringSubmatch(r.body, -1) {
		got = append(got, m[1]+"="+m[2])
	}
	// Configured sources in their order, then the others.
	if want := "stripe=3 github=1 acme=0 legacy=1"; strings.Join(got, " ") != want {
		t.Fatalf("plot series %v, want %s", got, want)
	}
	if n := strings.Count(r.body, "<circle "); n != 4*24 {
		t.Errorf("%d points, want 24 per series", n)
	}
	if n := strings.Count(r.body, "<polyline "); n != 4 {
		t.Errorf("%d polylines, want 4", n)
	}
	if !strings.Contains(r.body, "stripe, "+hour.UTC().Format("Jan 2 15:04")+": 2") {
		t.Errorf("no point for stripe's two events this hour")
	}

	stats := map[string][]string{}
	for _, m := range handlerRE.FindAllStringSubmatch(r.body, -1) {
		stats[m[1]] = m[2:]
	}
	if got, want := stats["billing"], []string{"600", "0.5000", "4", "2"}; strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("billing lag, failure rate, attempts, failures = %v, want %v", got, want)
	}
	if got, want := stats["audit"], []string{"", "0.0000", "0", "0"}; strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("audit = %v, want %v", got, want)
	}
	if !strings.Contains(r.body, ">10m</td>") || !strings.Contains(r.body, "50%") {
		t.Errorf("lag or failure rate not shown for people")
	}
	// No monitor: last events from the database, nothing flagged.
	if !strings.Contains(r.body, "No silence detector configured") || strings.Contains(r.body, `class="activity silent"`) {
		t.Errorf("source activity without a silence detector")
	}
	for _, want := range []string{`data-source="acme" data-silent="false">`, "never", hour.Add(2 * time.Second).UTC().Format("2006-01-02 15:04:05Z")} {
		if !strings.Contains(r.body, want) {
			t.Errorf("source activity lacks %q", want)
		}
	}
	// Recent events link to their pages.
	if !strings.Contains(r.body, fmt.Sprintf(`<a href="/dashboard/events/%d">%d</a>`, e1, e1)) {
		t.Errorf("no link to event %d", e1)
	}
}

type fakeSilence []dashboard.SourceActivity

func (f fakeSilence) SourceActivity(context.Context) ([]dashboard.SourceActivity, error) {
	return f, nil
}

func TestDashboardFlagsSilentSources(t *testing.T) {
	t.Parallel()
	now := time.Now().Truncate(time.Second)
	b := setup(t, options{now: now, silence: fakeSilence{
		{Source: "stripe", LastSeen: now.Add(-time.Minute)},
		{Source: "github", LastSeen: now.Add(-190 * time.Minute), Silent: true, Reason: "no event for 3h10m (2× the median gap 1h35m)"},
		{Source: "acme", Silent: true, Reason: "never received an event"},
	}})
	c := b.client(t)
	c.login()
	r := c.get("/dashboard/")
	if r.code != http.StatusOK {
		t.Fatalf("overview: %d", r.code)
	}
	for _, want := range []string{
		`<tr class="activity" data-source="stripe" data-silent="false">`,
		`<tr class="activity silent" data-source="github" data-silent="true">`,
		`<tr class="activity silent" data-source="acme" data-silent="true">`,
		`<span class="badge silent">silent</span> no event for 3h10m (2× the median gap 1h35m)`,
		`3h10m ago`,
	} {
		if !strings.Contains(r.body, want) {
			t.Errorf("overview lacks %s", want)
		}
	}
	if strings.Contains(r.body, "No silence detector configured") {
		t.Error("says no monitor though one is configured")
	}
}

func TestDashboardDatabaseDown(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, err := database.Open(ctx, "postgres://nobody@127.0.0.1:1/nothing?connect_timeout=2", database.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	c := &client{t: t, base: serve(t, pool, options{sources: []string{"stripe"}}, time.Now), header: http.Header{"Authorization": {"Bearer " + token}}}
	for _, p := range []string{"/dashboard/", "/dashboard/events/1", "/dashboard/events"} {
		r := c.get(p)
		if r.code != http.StatusServiceUnavailable || r.header.Get("Retry-After") == "" || !strings.Contains(r.body, "database is unavailable") {
			t.Errorf("GET %s with the database down: %d\n%s", p, r.code, r.body)
		}
	}
}

func TestNewChecksTheConfig(t *testing.T) {
	t.Parallel()
	for _, cfg := range []dashboard.Config{
		{Token: token},
		{DB: fakeDB{}, Token: "short"},
		{DB: fakeDB{}, Token: token, Bucket: 1500 * time.Millisecond},
		{DB: fakeDB{}, Token: token, Window: time.Minute, Bucket: time.Hour},
		{DB: fakeDB{}, Token: token, Window: 2000 * time.Hour, Bucket: time.Minute},
	} {
		if _, err := dashboard.New(cfg); err == nil {
			t.Errorf("New(%+v): no error", cfg)
		}
	}
}

type fakeDB struct{ admin.DB }

// Wrong tokens are limited per client address, on the login form and in a
// bearer header alike: past the budget even the right token is refused
// (429 with Retry-After) until time gives an attempt back, while other
// addresses log in.
func TestDashboardLoginIsRateLimitedPerAddress(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	var skew atomic.Int64
	now := func() time.Time { return b.now.Add(time.Duration(skew.Load())) }
	d, err := dashboard.New(dashboard.Config{DB: b.op, Token: token, Logger: slog.New(slog.DiscardHandler), Now: now,
		AuthLimiter: admin.NewAuthLimiter(admin.AuthLimit{Failures: 5, Every: 30 * time.Second, Now: now})})
	if err != nil {
		t.Fatal(err)
	}
	login := func(addr, tok string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("POST", "/dashboard/login", strings.NewReader(url.Values{"token": {tok}, "next": {"/dashboard/events"}}.Encode()))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		r.RemoteAddr = addr
		w := httptest.NewRecorder()
		d.ServeHTTP(w, r)
		return w
	}
	bearer := func(addr, tok string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("GET", "/dashboard/", nil)
		r.Header.Set("Authorization", "Bearer "+tok)
		r.RemoteAddr = addr
		w := httptest.NewRecorder()
		d.ServeHTTP(w, r)
		return w
	}
	const attacker, colleague = "203.0.113.7:50000", "198.51.100.9:50000"
	for i := range 3 {
		if w := login(attacker, fmt.Sprintf("guess-%d", i)); w.Code != http.StatusUnauthorized {
			t.Fatalf("wrong token %d: %d, want 401", i+1, w.Code)
		}
	}
	for i := range 2 { // one budget for the form and the header
		if w := bearer(attacker, fmt.Sprintf("guess-bearer-%d", i)); w.Code != http.StatusUnauthorized {
			t.Fatalf("wrong bearer token %d: %d, want 401", i+1, w.Code)
		}
	}
	for _, tok := range []string{"guess-6", token} {
		w := login(attacker, tok)
		if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") != "30" || w.Header().Get("Set-Cookie") != "" ||
			!strings.Contains(w.Body.String(), "Too many wrong tokens") || !strings.Contains(w.Body.String(), `name="token"`) {
			t.Fatalf("login after 5 wrong tokens: %d, Retry-After %q, cookie %q\n%s", w.Code, w.Header().Get("Retry-After"),
				w.Header().Get("Set-Cookie"), w.Body.String())
		}
	}
	if w := bearer(attacker, token); w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") == "" {
		t.Fatalf("bearer token after 5 wrong tokens: %d", w.Code)
	}
	// Another address is not locked out.
	if w := login(colleague, token); w.Code != http.StatusSeeOther || !strings.Contains(w.Header().Get("Set-Cookie"), "inlet_dashboard=") {
		t.Fatalf("another address with the token: %d", w.Code)
	}
	// 30 seconds give the attacker one attempt, not more.
	skew.Add(int64(30 * time.Second))
	if w := login(attacker, "guess-7"); w.Code != http.StatusUnauthorized {
		t.Fatalf("one attempt after 30s: %d, want 401", w.Code)
	}
	if w := login(attacker, token); w.Code != http.StatusTooManyRequests {
		t.Fatalf("a second attempt after 30s: %d, want 429", w.Code)
	}
	skew.Add(int64(30 * time.Second))
	if w := login(attacker, token); w.Code != http.StatusSeeOther || w.Header().Get("Location") != "/dashboard/events" {
		t.Fatalf("the token after the wait: %d", w.Code)
	}
}

// The overview shows each source's last reconcile run: a run that stored
// missing events and a failed one.
func TestDashboardShowsTheLastReconcileRun(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	b.exec(t, `INSERT INTO webhook_ingress.reconcile_runs (source, api, window_since, window_until, dry_run, finished_at, listed, missing, stored)
		VALUES ('stripe', 'stripe-events-api', now() - interval '1 day', now(), false, now(), 9, 9, 9)`)
	b.exec(t, `INSERT INTO webhook_ingress.reconcile_runs (source, api, window_since, window_until, dry_run, finished_at, listed, already_stored, missing, stored)
		VALUES ('stripe', 'stripe-events-api', now() - interval '1 day', now(), false, now(), 7, 4, 3, 3)`)
	b.exec(t, `INSERT INTO webhook_ingress.reconcile_runs (source, api, window_since, window_until, dry_run, finished_at, error)
		VALUES ('github', 'github-hook-deliveries', now() - interval '1 day', now(), false, now(), 'GET /repos/a/b/hooks/1/deliveries: 401 Unauthorized')`)
	c := b.client(t)
	c.login()
	r := c.get("/dashboard/")
	if r.code != http.StatusOK {
		t.Fatalf("overview: %d", r.code)
	}
	for _, want := range []string{
		`<tr class="reconcile-run" data-source="stripe" data-missing="3" data-stored="3">`,
		`<tr class="reconcile-run" data-source="github" data-missing="0" data-stored="0">`,
		`401 Unauthorized`,
	} {
		if !strings.Contains(r.body, want) {
			t.Errorf("overview lacks %s", want)
		}
	}
	if strings.Contains(r.body, `data-missing="9"`) {
		t.Error("the overview shows an older run")
	}
}
