package filter_test

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/inlet-dev/inlet/filter"
)

// reviewBatchBody is a telemetry-style batch well under filter.MaxPayload
// (about 400 KB): {"type":"metrics.batch","data":{"source":"edge-1",
// "samples":[0,1,2,...]}} with 110,000 samples (one JSON node each).
func reviewBatchBody(t *testing.T, n int) any {
	t.Helper()
	var b bytes.Buffer
	b.WriteString(`{"type":"metrics.batch","data":{"source":"edge-1","samples":[`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%d", i%1000)
	}
	b.WriteString(`]}}`)
	if b.Len() > filter.MaxPayload {
		t.Fatalf("body is %d bytes, over MaxPayload", b.Len())
	}
	p := filter.ParsePayload(b.Bytes())
	if p == nil {
		t.Fatal("body did not parse")
	}
	return p
}

// Filters of constant-time checks on a large payload match: they are not
// charged its deep size.
//
// Regression test (review helper-131; fixed: the text describes the
// behaviour before the fix; commit 8a18536,
// filter/filter.go deepCost.CallCost ~line 71-87): every ==, != and `in` with
// a list or map argument is charged the deep size of EVERY composite
// argument, including operations that do O(1) work:
//   - `key in map` is a hash lookup (CEL itself charges it 1), but is charged
//     the number of nodes of the whole map, values and all;
//   - `x != null` / `x == null` on a map is a type mismatch (CEL charges
//     min(size(a), size(b)), i.e. ~1), but is charged the whole map.
//
// So an ordinary presence/null check over a payload of ~100k JSON nodes
// (400 KB, under MaxPayload = 1 MiB) exceeds the 100,000 cost limit: the
// filter errors, ingress counts it as an evaluation "error" and creates no
// job: the subscribed handler silently never gets the event. Before the
// change these filters matched.
//
// Expected: each of these filters matches the event (a cost of a few units).
func TestConstantTimeChecksOnALargePayloadMatch(t *testing.T) {
	ev := filter.Event{Source: "telemetry", Type: "metrics.batch", Payload: reviewBatchBody(t, 110_000)}
	for _, expr := range []string{
		`payload.type == "metrics.batch" && payload.data != null`,
		`"samples" in payload.data`,
		`"data" in payload && payload.data.source == "edge-1"`,
		`payload.data.samples != []`,
	} {
		f, err := filter.Compile(expr)
		if err != nil {
			t.Fatal(err)
		}
		ok, err := f.Match(ev)
		if !ok || err != nil {
			t.Errorf("%s over a 110,000-sample batch: matched=%v err=%v; want a match (the operation is O(1))", expr, ok, err)
		}
	}
}
