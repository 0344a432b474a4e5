package filter_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/filter"
)

// timedMatch parses body (asserting it is under MaxPayload), compiles expr
// and matches it once, timing the evaluation.
func timedMatch(t *testing.T, body, expr string) (bool, time.Duration, error) {
	t.Helper()
	if len(body) > filter.MaxPayload {
		t.Fatalf("body is %d bytes, over MaxPayload", len(body))
	}
	p := filter.ParsePayload([]byte(body))
	if p == nil {
		t.Fatal("body did not parse")
	}
	f, err := filter.Compile(expr)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	ok, err := f.Match(filter.Event{Source: "s", Type: "t", Payload: p})
	return ok, time.Since(start), err
}

func repeatedOnes(n int) string { return strings.TrimSuffix(strings.Repeat("1,", n), ",") }

// TestStringEqualityWithALiteralWalksUncharged, before the fix: comparing a large
// payload string with a short literal costs the evaluation a walk of the
// whole string (and an allocation of 4 bytes per byte), charged 1 unit.
//
// Regression test (review helper-133; fixed: the text describes the
// behaviour before the fix). For == and != deepCost.CallCost
// (filter/filter.go ~line 90-104) returns nil unless both sides are lists
// or maps, so cel-go's standard tracker charges the call: ceil(0.1 ×
// min(size(lhs), size(rhs))) — 1 unit against a short literal. But to
// compute that charge the tracker asks each argument its Size(), and
// cel-go's types.String.Size() is len([]rune(s)): a full walk of the
// payload's string with a 4×len allocation, on every comparison. So
//
//	payload.items.exists(i, payload.currency == "usd")
//
// over a 906 KB body (a 900 KB currency, 3,000 items) runs for ~0.6-1 s
// (~10 s under -race; 4.8 s with 40,000 items before the limit ends it)
// within the cost limit, where a 100,000-unit evaluation takes ~10 ms: the package
// doc's "each evaluation is bounded in cost, since the payload is the
// sender's" does not hold, and at ingress such a webhook holds a core until
// store_timeout and is answered 503 on every retry.
//
// Expected: done in well under 500 ms, or refused by the cost limit.
func TestStringEqualityWithALiteralWalksUncharged(t *testing.T) {
	body := fmt.Sprintf(`{"currency":%q,"items":[%s]}`, strings.Repeat("a", 900_000), repeatedOnes(3_000))
	expr := `payload.items.exists(i, payload.currency == "usd")`
	ok, took, err := timedMatch(t, body, expr)
	if took > 500*time.Millisecond {
		t.Errorf("%s over a %d-byte body: took %v (matched=%v, err=%v); want it bounded: done in well under 500 ms, or refused by the cost limit",
			expr, len(body), took, ok, err)
	}
}

// TestDynStringConcatenationUncharged, before the fix: + of two payload strings
// copies both, charged 1 unit.
//
// Regression test (review helper-133; fixed: the text describes the
// behaviour before the fix). cel-go charges add_string 0.1 × (len(a) +
// len(b)), but only when the call's overload is known: with payload dyn,
// payload.a + payload.b is dispatched at run time (overload "_+_" among
// add_int64, add_list, add_string, …), so the standard tracker keyed by
// overload id is never consulted, and deepCost.CallCost (filter/filter.go
// ~line 77-120) has no case for _+_ on strings (its stringWalks map covers
// one-argument calls only). Each pass allocates and copies len(a)+len(b)
// bytes for ~1 unit: with a 480 KB string, 6,000 passes copy ~5.8 GB and
// take ~1 s (~5 s under -race) within the cost limit; 20,000 passes 3.5 s. (A .map() keeping the results would
// also hold gigabytes at once.)
//
// Expected: done in well under 500 ms, or refused by the cost limit (as
// payload.a + "x", whose overload is known, is: 0.1 a byte).
func TestDynStringConcatenationUncharged(t *testing.T) {
	body := fmt.Sprintf(`{"a":%q,"items":[%s]}`, strings.Repeat("a", 480_000), repeatedOnes(6_000))
	expr := `payload.items.all(i, (payload.a + payload.a).startsWith("a"))`
	ok, took, err := timedMatch(t, body, expr)
	if took > 500*time.Millisecond {
		t.Errorf("%s over a %d-byte body: took %v (matched=%v, err=%v); want it bounded: done in well under 500 ms, or refused by the cost limit",
			expr, len(body), took, ok, err)
	}
}

// TestSizeOfEachStringOnceIsRefused, before the fix: a filter that reads each of the
// payload's strings once is now refused on a body under MaxPayload.
//
// Regression test (review helper-133; fixed: the text describes the
// behaviour before the fix). A regression of aeeb7c3: size() of a string
// is charged len/10+1 (filter/filter.go ~line 78-88). One pass over the
// items of a 1,006,301-byte order (200 line items, 5,000-byte
// descriptions):
//
//	payload.items.all(i, size(i.description) <= 10000)
//
// is charged ~100,400 units, over costLimit (100,000), and ends in an error
// after ~0.6 ms of work: the filter misses (an evaluation error is a miss),
// so the handler silently gets no job for the event. Before aeeb7c3 it
// matched in a few ms. A linear pass over a body the filter accepts
// (MaxPayload) is the ordinary case the cost limit must admit (review
// helper-131: "charging those by the payload's size dropped ordinary
// filters on large payloads"); with 0.1 a byte, MaxPayload alone is 104,858
// units, more than the whole limit.
//
// Expected: matched (true, no error).
func TestSizeOfEachStringOnceIsRefused(t *testing.T) {
	var b strings.Builder
	b.WriteString(`{"items":[`)
	for k := range 200 {
		if k > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `{"sku":"S%d","description":%q}`, k, strings.Repeat("x", 5000))
	}
	b.WriteString(`]}`)
	expr := `payload.items.all(i, size(i.description) <= 10000)`
	ok, took, err := timedMatch(t, b.String(), expr)
	if !ok || err != nil {
		t.Errorf("%s over a %d-byte body (one pass over its strings, %v): matched=%v, err=%v; want a match",
			expr, b.Len(), took, ok, err)
	}
}
