//go:build knownlimits

package filter_test

import (
	"fmt"
	"testing"

	"github.com/inlet-dev/inlet/filter"
)

// A known limit (docs/pipeline.md, filters), kept out of go tool task test
// until fixed: go test -tags knownlimits -run TestKnownLimit ./filter/
//
// A filter must give one answer for one event: ingress and catch-up each
// evaluate it once and must agree. Iterating a JSON object follows Go's
// randomised map order.
func TestKnownLimitMapIterationDeterministic(t *testing.T) {
	obj := map[string]any{}
	for i := range 16 {
		obj[fmt.Sprintf("k%02d", i)] = float64(i)
	}
	f, err := filter.Compile(`payload.map(k, k)[0] == "k00"`)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[bool]int{}
	for range 200 {
		ok, _ := f.Match(filter.Event{Payload: obj})
		seen[ok]++
	}
	if len(seen) > 1 {
		t.Fatalf("one event, 200 evaluations: matched %d times, missed %d times", seen[true], seen[false])
	}
}
