package filter_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/filter"
)

// size() and the conversions of a large string are charged its length.
//
// Regression test (review helper-132; fixed: the text describes the
// behaviour before the fix). A filter's evaluation was not bounded by the
// cost limit when it calls size() or double() on a large string of the
// payload. Both walk the whole string (size counts its code points:
// cel-go types.String.Size is len([]rune(s)); double is strconv.ParseFloat,
// which reads every digit) but CEL charges them 1 unit, and deepCost.CallCost
// (filter/filter.go ~line 76) keeps CEL's charge for everything but ==, !=
// and in. So with a ~1 MB string (under filter.MaxPayload) inside a
// comprehension, an evaluation WITHIN the cost limit (it returns a match, no
// error) runs for seconds: size() 3,000 passes × 0.4 ms (~3 ms under -race), double() 1,000 passes × ~3 ms, while an ordinary filter that spends the whole 100,000 units takes ~10 ms. The package doc says "Each
// evaluation is bounded in cost ... since the payload is the sender's", and
// docs/pipeline.md "Evaluation is bounded in cost"; ingress gives up on the
// request at store_timeout (5 s by default) and answers 503, so such a
// webhook is refused every time the provider retries (never stored), while
// each try burns a core for the whole store_timeout.
//
// Expected: these evaluations either finish quickly or end with the cost
// limit (a miss with a cost error), as the same walk written as
// payload.note == payload.other (charged 0.1 × length) does.
func TestStringWalksAreChargedTheirLength(t *testing.T) {
	items := strings.TrimSuffix(strings.Repeat("1,", 3000), ",")
	few := strings.TrimSuffix(strings.Repeat("1,", 1000), ",")
	note := strings.Repeat("a", 1_000_000)
	digits := "1." + strings.Repeat("0", 999_000) // 1.0, written long
	for _, c := range []struct{ name, body, expr string }{
		{"size", fmt.Sprintf(`{"note":%q,"items":[%s]}`, note, items), `payload.items.all(i, size(payload.note) > 0)`},
		{"size-member", fmt.Sprintf(`{"note":%q,"items":[%s]}`, note, items), `payload.items.all(i, payload.note.size() > 0)`},
		{"double", fmt.Sprintf(`{"amount":%q,"items":[%s]}`, digits, few), `payload.items.all(i, double(payload.amount) == 1.0)`},
	} {
		t.Run(c.name, func(t *testing.T) {
			if len(c.body) > filter.MaxPayload {
				t.Fatalf("body is %d bytes, over MaxPayload", len(c.body))
			}
			p := filter.ParsePayload([]byte(c.body))
			if p == nil {
				t.Fatal("body did not parse")
			}
			f, err := filter.Compile(c.expr)
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			ok, err := f.Match(filter.Event{Source: "s", Type: "t", Payload: p})
			took := time.Since(start)
			if took > 500*time.Millisecond { // an ordinary 100,000-unit evaluation takes ~10 ms
				t.Errorf("%s over a %d-byte body: took %v within the cost limit (matched=%v, err=%v); "+
					"want it bounded: done in well under 500 ms, or refused by the cost limit", c.expr, len(c.body), took, ok, err)
			}
		})
	}
}
