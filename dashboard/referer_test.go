package dashboard_test

import (
	"fmt"
	"net/http"
	"net/url"
	"testing"
	"time"
)

// TestReplayFromAForeignRefererIsRefused (review helper-162, fixed; this describes the code before the fix):
// the package doc (dashboard/doc.go) promises that the replay form
// is protected three ways, the third being "an Origin (or Referer) that must
// name this host", and dashboard.go sets Referrer-Policy same-origin because
// "Same-origin Referers are what the CSRF check reads when a browser sends no
// Origin". But the check (dashboard/auth.go, crossOrigin =
// http.NewCrossOriginProtection()) never reads Referer: net/http's
// CrossOriginProtection.Check looks at Sec-Fetch-Site, then Origin, and lets
// a request with neither through whatever its Referer says. So a POST whose
// Referer names another site (an older browser or an embedded web view that
// sends Referer but no Origin / Sec-Fetch-Site on a form post) passes the
// origin layer: only the CSRF token is left, not the documented three layers.
//
// Expected (as documented): a state-changing request with no Origin and no
// Sec-Fetch-Site whose Referer names another host is refused with 403 and
// changes nothing.
func TestReplayFromAForeignRefererIsRefused(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	b.subscribe(t, "billing", "stripe")
	ev := b.insert(t, "stripe", "evt_referer", []byte(`{"id":"evt_referer"}`), b.now.Add(-time.Hour))
	job := b.jobID(t, ev, "billing")
	b.deadLetter(t, job)

	c := b.client(t)
	c.login()
	csrf := c.csrf("/dashboard/")
	form := url.Values{"job_id": {fmt.Sprint(job)}, "csrf": {csrf}, "return": {"/dashboard/"}}
	r := c.do("POST", "/dashboard/replay", form, http.Header{"Referer": {"https://evil.example/lure.html"}})
	if r.code != http.StatusForbidden {
		t.Errorf("replay posted from https://evil.example (Referer only, no Origin): %d, want 403", r.code)
	}
	if s := b.status(t, job); s != "dead_letter" {
		t.Errorf("after a replay posted from another site the job is %s, want dead_letter (nothing changed)", s)
	}
}
