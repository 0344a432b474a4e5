package filter_test

import (
	"strings"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/filter"
)

// A timestamp getter with a time zone is charged its zone's loading.
//
// Regression test (review helper-136; fixed: the text describes the
// behaviour before the fix). A timestamp getter with a time zone
// (getHours("Europe/Berlin"), getDayOfWeek(payload.tz), ...) was charged
// CEL's default of 1, but each
// call runs time.LoadLocation: it opens and parses zoneinfo files from disk
// (several, when the name is unknown). In a comprehension over a large list
// of the payload the evaluation runs for seconds within costLimit.
//
// Expected: an evaluation within the cost limit ends well under a second.
func TestTimezoneGetterInComprehensionIsBounded(t *testing.T) {
	var b strings.Builder
	b.WriteString(`{"tz":"Nowhere/Zone","xs":[`)
	for i := range 150_000 {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('0')
	}
	b.WriteString(`]}`)
	if b.Len() > filter.MaxPayload {
		t.Fatalf("body is %d bytes", b.Len())
	}
	p := filter.ParsePayload([]byte(b.String()))
	if p == nil {
		t.Fatal("body did not parse")
	}
	now := time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)
	for _, expr := range []string{
		// the zone is the sender's (an unknown name: every call searches every zoneinfo source)
		`payload.xs.all(x, event.occurred_at.getHours(payload.tz) >= 0)`,
		// the zone is the filter author's literal
		`payload.xs.all(x, event.occurred_at.getHours("America/New_York") >= 0)`,
		`payload.xs.all(x, event.occurred_at.getHours("Nowhere/Zone") + event.occurred_at.getMinutes("Nowhere/Zone") >= 0)`,
	} {
		f, err := filter.Compile(expr)
		if err != nil {
			t.Fatal(err)
		}
		st := time.Now()
		ok, err := f.Match(filter.Event{OccurredAt: &now, Payload: p})
		d := time.Since(st)
		t.Logf("%v %s", d, expr)
		if d > time.Second {
			t.Errorf("%s over a %d-byte body: ran %v within the cost limit (ok=%v err=%v); want under 1 s", expr, b.Len(), d, ok, err)
		}
	}
}
