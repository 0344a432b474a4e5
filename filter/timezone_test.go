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
	now := time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)
	exprs := []string{
		// the zone is the sender's (an unknown name: every call searches every zoneinfo source)
		`payload.xs.all(x, event.occurred_at.getHours(payload.tz) >= 0)`,
		// the zone is the filter author's literal
		`payload.xs.all(x, event.occurred_at.getHours("America/New_York") >= 0)`,
		`payload.xs.all(x, event.occurred_at.getHours("Nowhere/Zone") + event.occurred_at.getMinutes("Nowhere/Zone") >= 0)`,
	}
	eval := func(n int, expr string) (bool, time.Duration, error) {
		t.Helper()
		body := `{"tz":"Nowhere/Zone","xs":[` + strings.TrimSuffix(strings.Repeat("0,", n), ",") + `]}`
		if len(body) > filter.MaxPayload {
			t.Fatalf("body is %d bytes", len(body))
		}
		p := filter.ParsePayload([]byte(body))
		if p == nil {
			t.Fatal("body did not parse")
		}
		f, err := filter.Compile(expr)
		if err != nil {
			t.Fatal(err)
		}
		st := time.Now()
		ok, err := f.Match(filter.Event{OccurredAt: &now, Payload: p})
		return ok, time.Since(st), err
	}
	for _, expr := range exprs {
		// The charge, deterministically: 20,000 zoned getters at 100 each
		// are over the limit (at 1 each the evaluation ran to its end).
		if ok, d, err := eval(20_000, expr); err == nil || !strings.Contains(err.Error(), "cost limit") {
			t.Errorf("%s over 20,000 items: ok=%v err=%v after %v; want it ended by the cost limit (each zoned getter charged its zone's loading)", expr, ok, err, d)
		}
		// The time over a largest body, without the race detector only
		// (it makes the run ~10 times longer: on a loaded machine it
		// passed a second, CI 2026-12-06).
		if raceEnabled {
			continue
		}
		ok, d, err := eval(150_000, expr)
		t.Logf("%v %s", d, expr)
		if d > time.Second {
			t.Errorf("%s over 150,000 items: ran %v within the cost limit (ok=%v err=%v); want under 1 s", expr, d, ok, err)
		}
	}
}
