package filter_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/filter"
)

// The same instant must evaluate the same whatever *time.Location it carries:
// ingress passes the provider's parsed offset (verify.parseOccurred keeps
// "+02:00"), catch-up passes pgx's timestamptz (time.Local). CEL's
// timestamp accessors without a time zone are UTC by the spec. Match passes
// it in UTC. (Found by a review: string(event.occurred_at) differed.)
func TestOccurredAtLocationIndependent(t *testing.T) {
	utc := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	plus2 := utc.In(time.FixedZone("", 2*3600)) // the same instant, as parsed from "2026-12-01T12:00:00+02:00"
	for _, expr := range []string{
		`event.occurred_at.getHours() == 10`,
		`string(event.occurred_at) == "2026-12-01T10:00:00Z"`,
	} {
		f, err := filter.Compile(expr)
		if err != nil {
			t.Fatal(err)
		}
		a, errA := f.Match(filter.Event{OccurredAt: &utc})
		b, errB := f.Match(filter.Event{OccurredAt: &plus2})
		if a != b {
			t.Errorf("%s: %v (%v) for %s, %v (%v) for %s: one instant, two results",
				expr, a, errA, utc.Format(time.RFC3339), b, errB, plus2.Format(time.RFC3339))
		}
	}
}

// Header names are lower-cased; two names differing only in case merge the
// same way every time (in the order of the names), not by map iteration
// order. (Found by a review.)
func TestHeadersCaseCollisionDeterministic(t *testing.T) {
	f, err := filter.Compile(`event.headers["x-a"] == "1"`)
	if err != nil {
		t.Fatal(err)
	}
	ev := filter.Event{Headers: map[string][]string{"X-A": {"1"}, "x-a": {"2"}}}
	seen := map[bool]int{}
	for range 200 {
		ok, _ := f.Match(ev)
		seen[ok]++
	}
	if len(seen) > 1 {
		t.Fatalf("one event, 200 evaluations: matched %d times, missed %d times", seen[true], seen[false])
	}
}

// "Evaluation is bounded in cost (the payload is the sender's)": matches()
// takes a literal pattern only, checked when the filter compiles. (Found by a
// review: a pattern taken from the payload ran to completion before CEL
// charged its cost, and a 400 KB body held an ingress goroutine for about a
// minute.)
func TestRegexPatternsAreLiterals(t *testing.T) {
	for _, expr := range []string{`payload.s.matches(payload.re)`, `matches(payload.s, payload.re)`, `payload.s.matches("a" + payload.re)`} {
		if _, err := filter.Compile(expr); err == nil || !strings.Contains(err.Error(), "literal pattern") {
			t.Errorf("Compile(%s): %v; want a refusal naming the literal pattern", expr, err)
		}
	}
	f, err := filter.Compile(`payload.s.matches("^a+$") && matches(event.type, "^charge[.]")`)
	if err != nil {
		t.Fatalf("literal patterns: %v", err)
	}
	body := fmt.Sprintf(`{"s":%q}`, strings.Repeat("a", 200_000))
	start := time.Now()
	if ok, err := f.Match(filter.Event{Type: "charge.succeeded", Payload: filter.ParsePayload([]byte(body))}); !ok || err != nil {
		t.Errorf("Match = %v, %v; want a match", ok, err)
	}
	t.Logf("a literal pattern over a 200 KB text: %v", time.Since(start))
}
