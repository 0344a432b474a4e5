package dashboard_test

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestSurvivor268_PlotEscapesAStoredSourceName (mutation tester helper-268).
// Guarantee: nothing stored reaches the dashboard as markup. The overview's
// plot is the one template.HTML the dashboard writes (renderPlot: "every
// text is escaped here, since the result is trusted HTML"), and it shows
// every source with events in the window, configured or not: a provider
// name is whatever a row holds (the events table only requires it to be
// non-empty).
// Mutant: dashboard/plot.go:87, the series' <title>:
// `esc(s.Source)` -> `s.Source` (the name written into the page unescaped:
// stored XSS on the page every operator opens first).
// Why existing tests missed it: the plot tests use plain source names
// (stripe, github, legacy) and the escaping tests cover the event page's
// body, headers and error text, which html/template escapes itself.
func TestSurvivor268_PlotEscapesAStoredSourceName(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	const hostile = `<img src=x onerror=alert(268)>`
	b.insert(t, hostile, "evt_survivor268", []byte(`{}`), b.now.Truncate(time.Hour).Add(time.Second))
	c := b.client(t)
	c.login()
	r := c.get("/dashboard/")
	if r.code != http.StatusOK {
		t.Fatalf("overview: %d\n%s", r.code, r.body)
	}
	if strings.Contains(r.body, "<img") {
		t.Errorf("the overview carries markup from a stored source name %q:\n%s", hostile, r.body)
	}
	if want := `&lt;img src=x onerror=alert(268)&gt;: 1 events`; !strings.Contains(r.body, want) {
		t.Errorf("the plot does not show the source %q as text (want %s):\n%s", hostile, want, r.body)
	}
}
