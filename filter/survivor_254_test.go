package filter_test

import (
	"strings"
	"testing"

	"github.com/inlet-dev/inlet/filter"
)

// TestSurvivor254_NonBoolResultIsAMiss guards MatchContext's documented
// rule: an expression must be a bool, and one whose (dyn) result for an
// event is not a bool is a miss, returned with the error so the caller can
// count it — never a match, which would fan the event out to a
// subscription that did not ask for it.
//
// Mutant (helper-254): filter.go:416 `return false, fmt.Errorf(... "want a
// bool")` changed to `return true, ...`. Existing tests only check that a
// literal non-bool ("charge", 1 + 2) is refused at Compile; no test
// evaluates a dyn expression (payload.x) that yields a non-bool at run
// time, so the mutant survived.
func TestSurvivor254_NonBoolResultIsAMiss(t *testing.T) {
	t.Parallel()
	for _, expr := range []string{`payload.flag`, `payload.data.count`, `payload.list`, `event.headers`} {
		f, err := filter.Compile(expr)
		if err != nil {
			t.Fatalf("Compile(%q): %v; want a dyn expression accepted", expr, err)
		}
		ev := filter.Event{Source: "stripe", Type: "charge.succeeded",
			Headers: map[string][]string{"X-A": {"1"}},
			Payload: map[string]any{"flag": "true", "data": map[string]any{"count": 1.0}, "list": []any{true}}}
		ok, err := f.Match(ev)
		if ok || err == nil || !strings.Contains(err.Error(), "want a bool") {
			t.Errorf("%s on a non-bool value: Match = %v, %v; want false with a \"want a bool\" error", expr, ok, err)
		}
	}
}

// TestSurvivor254_CaseVariantHeadersJoinInNameOrder guards the rule in
// MatchContext (and the package doc: lower-case names, repeated values
// joined with ", "): header names that differ only in case are one header,
// their values joined in the sorted order of the names, so every
// evaluation (ingress and catch-up alike) sees the same string.
//
// Mutant (helper-254): filter.go:392 `v = prev + ", " + v` changed to
// `v = v + ", " + prev`. TestMatch only has headers whose names differ in
// more than case, so the merge order was never observed.
func TestSurvivor254_CaseVariantHeadersJoinInNameOrder(t *testing.T) {
	t.Parallel()
	f, err := filter.Compile(`event.headers["x-tag"] == "A, b1, b2, c"`)
	if err != nil {
		t.Fatal(err)
	}
	// Sorted names: "X-TAG" < "X-Tag" < "x-tag".
	ev := filter.Event{Source: "s", Type: "t",
		Headers: map[string][]string{"x-tag": {"c"}, "X-Tag": {"b1", "b2"}, "X-TAG": {"A"}}}
	for i := 0; i < 20; i++ {
		ok, err := f.Match(ev)
		if err != nil || !ok {
			t.Fatalf("Match = %v, %v; want event.headers[\"x-tag\"] to be \"A, b1, b2, c\" (values in the order of the names)", ok, err)
		}
	}
}
