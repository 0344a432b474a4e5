package tests

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/internal/chromium"
	"github.com/inlet-dev/inlet/internal/pgtest"
)

// The dashboard in a real headless Chromium: log in through the form, see the
// seeded sources and events, re-queue a dead letter with its Replay button,
// and open an event whose body is a script that must show as text and never
// run. Screenshots go to the test artifacts.
//
// The dashboard is served by the real inlet ingress on its admin listener.
func TestDashboardInChromium(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	browser, err := chromium.Find(ctx, chromium.Options{Install: true})
	if err != nil {
		t.Fatalf("the dashboard test needs Chromium: %v", err)
	}

	// Seed: two sources, a script body, a dead letter.
	url := pgtest.NewDatabase(t)
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := conn.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	insert := func(source, id string, body string, ago time.Duration) int64 {
		t.Helper()
		var eid int64
		err := conn.QueryRow(ctx, `INSERT INTO webhook_ingress.events
			(provider, scheme, external_event_id, event_type, received_at, headers, request_uri, raw_body, signature_verified)
			VALUES ($1, $1, $2, 'invoice.paid', now() - $3::interval, '{"Content-Type": ["application/json"]}', '/webhooks/' || $1, $4, true)
			RETURNING id`, source, id, fmt.Sprintf("%d seconds", int(ago.Seconds())), []byte(body)).Scan(&eid)
		if err != nil {
			t.Fatalf("insert %s: %v", id, err)
		}
		return eid
	}
	exec(`INSERT INTO webhook_ingress.subscriptions (handler, provider_pattern, max_attempts) VALUES ('billing', 'stripe', 3)`)
	insert("stripe", "evt_e2e_dash_1", `{"id":"evt_e2e_dash_1"}`, 3*time.Hour)
	insert("github", "gh-e2e-dash-1", `{"action":"opened"}`, 2*time.Hour)
	script := `{"note":"<script>window.__pwned = 1; document.title = 'pwned'</script>"}`
	scriptEvent := insert("stripe", "evt_e2e_dash_script", script, time.Hour)
	dead := insert("stripe", "evt_e2e_dash_dead", `{"id":"evt_e2e_dash_dead"}`, 30*time.Minute)
	var deadJob int64
	if err := conn.QueryRow(ctx, `UPDATE webhook_ingress.jobs SET status = 'dead_letter', attempt_count = 3,
		last_error = 'billing API said 500', last_error_class = 'http_5xx', updated_at = now()
		WHERE event_id = $1 AND handler = 'billing' RETURNING id`, dead).Scan(&deadJob); err != nil {
		t.Fatal(err)
	}
	status := func() string {
		var s string
		if err := conn.QueryRow(ctx, `SELECT status FROM webhook_ingress.jobs WHERE id = $1`, deadJob).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}

	// inlet ingress serves the dashboard on its admin listener, as
	// webhook_operator. github's one event is older than its max_silence.
	const token = "e2e-dashboard-token-0123456789"
	adminAddr := freeAddr(t)
	cfg := writeFile(t, t.TempDir(), "inlet.yaml", `
database_url: ${DATABASE_URL}
ingress:
  listen: "`+freeAddr(t)+`"
  metrics_listen: "127.0.0.1:0"
admin:
  listen: "`+adminAddr+`"
  token: "${ADMIN_TOKEN}"
sources:
  - {name: stripe, type: stripe, secrets: ["whsec_e2e_dashboard"]}
  - {name: github, type: github, secrets: ["e2e-dashboard-github"]}
silence:
  max_silence: {github: 1h}
`)
	p := start(t, cleanEnv("DATABASE_URL="+url, "ADMIN_TOKEN="+token), "ingress", "--config", cfg)
	p.waitLog("admin API listening", 30*time.Second)
	base := "http://" + adminAddr

	// A headless browser of its own (profile in a temporary directory). As
	// root (CI) Chromium runs only without its sandbox.
	var browserLog lockedBuffer
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(ctx, append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(browser),
		chromedp.NoSandbox,
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("disable-gpu", true),
		chromedp.UserDataDir(t.TempDir()),
		// Its shared memory files (org.chromium.Chromium.*, in TMPDIR with
		// disable-dev-shm-usage) stayed behind when the test ended it.
		chromedp.Env("TMPDIR="+t.TempDir()),
		chromedp.WindowSize(1280, 900),
		chromedp.CombinedOutput(&browserLog),
	)...)
	defer cancelAlloc()
	tab, cancelTab := chromedp.NewContext(allocCtx, chromedp.WithErrorf(browserLog.printf))
	defer cancelTab()
	tab, cancelTimeout := context.WithTimeout(tab, 3*time.Minute)
	defer cancelTimeout()
	defer func() {
		if t.Failed() {
			t.Logf("browser output:\n%s", browserLog.String())
		}
	}()
	run := func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(tab, steps...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	eval := func(js string) string {
		t.Helper()
		v, err := chromedp.Run(tab, chromedp.Evaluate[string](js))
		if err != nil {
			t.Fatalf("evaluate %s: %v", js, err)
		}
		return v
	}
	submit := func(what string, button string) {
		t.Helper()
		resp, err := chromedp.RunResponse(tab, chromedp.Click(chromedp.CSS(button)))
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if resp.Status != http.StatusOK {
			t.Fatalf("%s: the page after it answered %d (%s)", what, resp.Status, resp.URL)
		}
	}

	// Log in: the overview redirects to the form, which comes back to it.
	run("open the dashboard", chromedp.Navigate(base+"/dashboard/"), chromedp.WaitVisible(chromedp.ID("token")))
	if loc := eval(`location.pathname`); loc != "/dashboard/login" {
		t.Fatalf("without a session the dashboard is at %s, want the login form", loc)
	}
	run("type the token", chromedp.SendKeys(chromedp.ID("token"), token))
	submit("log in", "#login")
	run("overview", chromedp.WaitVisible(chromedp.ID("rates")))
	if loc := eval(`location.pathname`); loc != "/dashboard/" {
		t.Fatalf("after logging in the browser is at %s", loc)
	}
	if got := eval(`document.cookie`); got != "" {
		t.Errorf("the session cookie is readable from script: %q", got)
	}

	// The overview lists the seeded sources and events.
	text := eval(`document.body.innerText`)
	for _, want := range []string{"stripe", "github", "evt_e2e_dash_1", "gh-e2e-dash-1", "evt_e2e_dash_script", "billing", "http_5xx"} {
		if !strings.Contains(text, want) {
			t.Errorf("the overview does not show %q", want)
		}
	}
	if got := eval(`Array.from(document.querySelectorAll('tr.activity')).map(r => r.dataset.source + '=' + r.dataset.silent).join(' ')`); got != "github=true stripe=false" {
		t.Errorf("source activity: %q, want github silent (max_silence 1h), stripe not", got)
	}
	// github's invoice.paid matches no subscription: the overview shows it
	// as an unrouted type, above everything else.
	if got := eval(`Array.from(document.querySelectorAll('#unrouted-types tr.unrouted-type')).map(r => r.dataset.source + '/' + r.dataset.type + '=' + r.dataset.unrouted).join(' ')`); got != "github/invoice.paid=1" {
		t.Errorf("unrouted types on the overview: %q, want github/invoice.paid=1", got)
	}
	if got := eval(`String(document.querySelector('#unrouted-types').getBoundingClientRect().top < document.querySelector('#rates').getBoundingClientRect().top)`); got != "true" {
		t.Errorf("the unrouted types are not shown above the rates")
	}
	// inlet events types lists it first, with its figures.
	out, errOut, code := runInlet(t, cleanEnv("DATABASE_URL="+url, "ADMIN_TOKEN="+token), "events", "types", "--config", cfg)
	if lines := strings.Split(strings.TrimSpace(out), "\n"); code != 0 || len(lines) < 3 ||
		!strings.HasPrefix(strings.Join(strings.Fields(lines[1]), " "), "github invoice.paid no 1 1 ") {
		t.Errorf("inlet events types: exit %d, stderr %s\n%s\nwant github invoice.paid (routed no, 1 event, 1 unrouted) first", code, errOut, out)
	}
	if got := eval(`Array.from(document.querySelectorAll('svg.plot g.series')).map(g => g.dataset.source + '=' + g.dataset.total).join(' ')`); got != "stripe=3 github=1" {
		t.Errorf("plot series: %q, want stripe=3 github=1", got)
	}
	if got := eval(`String(document.styleSheets.length && document.styleSheets[0].cssRules.length > 0)`); got != "true" {
		t.Errorf("the stylesheet did not load under the CSP")
	}
	screenshot(t, tab, "dashboard-overview.png")

	// Replay the dead letter with its button: re-queued in the database.
	button := fmt.Sprintf(`tr.dead-letter[data-job-id="%d"] button.replay`, deadJob)
	submit("click Replay", button)
	run("flash", chromedp.WaitVisible(chromedp.CSS(".flash.ok")))
	if s := status(); s != "pending" {
		t.Fatalf("after Replay the job is %s, want pending", s)
	}
	if msg := eval(`document.querySelector('.flash.ok').innerText`); msg != fmt.Sprintf("Job %d re-queued.", deadJob) {
		t.Errorf("flash: %q", msg)
	}
	if n := eval(fmt.Sprintf(`String(document.querySelectorAll('tr.dead-letter[data-job-id="%d"]').length)`, deadJob)); n != "0" {
		t.Errorf("the replayed job is still listed as a dead letter")
	}

	// The script event: its body is text, and nothing in it ran.
	run("event page", chromedp.Navigate(fmt.Sprintf("%s/dashboard/events/%d", base, scriptEvent)), chromedp.WaitVisible(chromedp.ID("event-body")))
	body, err := chromedp.Run(tab, chromedp.Text(chromedp.ID("event-body")))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(body, "<script>window.__pwned = 1;") || body != script {
		t.Errorf("the body shows as %q, want the stored text %q", body, script)
	}
	if got := eval(`typeof window.__pwned`); got != "undefined" {
		t.Errorf("the body's script ran: window.__pwned is %s", got)
	}
	if got := eval(`document.title`); got == "pwned" || !strings.Contains(got, "Event") {
		t.Errorf("document.title = %q", got)
	}
	if got := eval(`String(document.querySelectorAll('script').length)`); got != "0" {
		t.Errorf("%s script elements in the page", got)
	}
	screenshot(t, tab, "dashboard-event.png")
}

// screenshot saves a full-page PNG of tab to the artifact directory:
// $INLET_TEST_ARTIFACTS, else tests/artifacts.
func screenshot(t *testing.T, tab context.Context, name string) {
	t.Helper()
	dir := os.Getenv("INLET_TEST_ARTIFACTS")
	if dir == "" {
		dir = "artifacts"
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	png, err := chromedp.Run(tab, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	if !bytes.HasPrefix(png, []byte("\x89PNG")) {
		t.Fatalf("screenshot %s is not a PNG", name)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", path)
}

// lockedBuffer collects the browser's output and chromedp's errors, shown
// when the test fails.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) printf(format string, args ...any) {
	fmt.Fprintf(b, format+"\n", args...)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
