package filter_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/filter"
)

// boundedRun compiles expr, parses body as ingress does and evaluates it with
// a 5 s deadline: a bounded evaluation ends (matching, missing or refused by
// the cost limit) in well under that.
func boundedRun(t *testing.T, expr string, body []byte) {
	t.Helper()
	if len(body) > filter.MaxPayload {
		t.Fatalf("body is %d bytes, over MaxPayload", len(body))
	}
	p := filter.ParsePayload(body)
	if p == nil {
		t.Fatal("payload did not parse")
	}
	f, err := filter.Compile(expr)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	t0 := time.Now()
	ok, err := f.MatchContext(ctx, filter.Event{Source: "github", Type: "push", Payload: p})
	el := time.Since(t0)
	if errors.Is(err, context.DeadlineExceeded) || el > time.Second {
		t.Fatalf("a %d-byte body (under MaxPayload) kept %q running %v within the cost limit (stopped only by the 5 s deadline: %v; ok=%v)", len(body), expr, el.Round(time.Millisecond), err, ok)
	}
	t.Logf("ended in %v: ok=%v err=%v", el, ok, err)
}

func zeros(n int) []any {
	l := make([]any, n)
	for i := range l {
		l[i] = 0
	}
	return l
}

// Regression tests (review helper-135; fixed: the text describes the
// behaviour before the fix): measuring a value for its charge walked it
// whole, and the charge did not cover the walk.
//
// x in list is charged len(list) × deepSize(x), but deepSize(x) was walked
// first, whatever the list's length: against an empty list the walk of a
// 300k-element needle is charged 0, once per item of a comprehension.
func TestInWalksNeedleAgainstEmptyList(t *testing.T) {
	items := make([]any, 30_000)
	for i := range items {
		items[i] = map[string]any{"tags": []any{}}
	}
	body, _ := json.Marshal(map[string]any{"wanted": zeros(300_000), "items": items})
	boundedRun(t, `payload.items.exists(i, payload.wanted in i.tags)`, body)
}

// An == of two lists of one size is charged the smaller deep size, but both
// deep sizes are walked: [<300k elements>] == [0] is charged 1 and walks
// 300k elements, once per item of a comprehension.
func TestListEqualityWalksLargerSideUncharged(t *testing.T) {
	items := make([]any, 30_000)
	for i := range items {
		items[i] = map[string]any{"tags": []any{0}}
	}
	body, _ := json.Marshal(map[string]any{"expected": []any{zeros(300_000)}, "items": items})
	boundedRun(t, `payload.items.exists(i, i.tags == payload.expected)`, body)
}

// The same for two maps of different sizes (decided at once by CEL, yet
// both walked).
func TestMapEqualityWalksLargerSideUncharged(t *testing.T) {
	m := map[string]any{}
	for i := range 60_000 {
		m[strings.Repeat("k", 1)+string(rune('a'+i%26))+string(rune(0x100+i/26))] = 0
	}
	items := make([]any, 30_000)
	for i := range items {
		items[i] = map[string]any{"meta": map[string]any{}}
	}
	body, _ := json.Marshal(map[string]any{"expected": m, "items": items})
	boundedRun(t, `payload.items.exists(i, i.meta == payload.expected)`, body)
}
