package filter_test

import (
	"encoding/json"
	"fmt"
	"math/bits"
	"strings"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/filter"
)

// TestContainsLongNeedleOnLargePayloadMisses (review helper-140, fixed; this
// describes the code before the fix): an ordinary contains() filter misses a
// large but legitimate event: the cost limit refuses it although the work is
// a single, sub-millisecond pass over the string. cel-go charges
// s.contains(sub) (len(s)×0.1) × (len(sub)×0.1) (common/cost/standard.go,
// overloads.ContainsString: an O(n·m) model) while Go's strings.Contains is
// one linear pass; deepCost does not override it. With costLimit =
// 3×MaxPayload/10 = 314,572, any needle of 32 or more bytes is over the limit
// on a 1 MB text, one of ~100 bytes on a 300 KB text. The comment on
// costLimit promises "a filter that reads each of its strings once must
// fit"; contains() reads its string once (about 0.5 ms here). The evaluation
// ends in "actual cost limit exceeded", a miss: the handler silently gets no
// job for exactly the event it asked for (only
// inlet_ingress_filter_evaluations_total{result="error"} moves), at ingress
// and in catch-up alike.
//
// Now: the event matches (the text contains the phrase).
func TestContainsLongNeedleOnLargePayloadMisses(t *testing.T) {
	f, err := filter.Compile(`payload.log.contains("OutOfMemoryError: Java heap space")`)
	if err != nil {
		t.Fatal(err)
	}
	// A CI / alerting webhook carrying a ~1 MB job log that ends in the error.
	line := "2026-12-01T10:00:00Z INFO worker-7 processed batch 123456 in 42ms\n"
	log := strings.Repeat(line, 1_000_000/len(line)) + "java.lang.OutOfMemoryError: Java heap space\n"
	body := fmt.Sprintf(`{"job":"nightly","status":"failed","log":%q}`, log)
	if len(body) > filter.MaxPayload {
		t.Fatalf("body is %d bytes, over MaxPayload", len(body))
	}
	payload := filter.ParsePayload([]byte(body))
	if payload == nil {
		t.Fatal("payload did not parse")
	}
	start := time.Now()
	ok, err := f.Match(filter.Event{Source: "ci", Type: "job.failed", Payload: payload})
	t.Logf("evaluation over a %d-byte body: %v", len(body), time.Since(start))
	if !ok || err != nil {
		t.Errorf("%s over a %d-byte payload whose log contains the phrase: match=%v, err=%v; want a match",
			f, len(body), ok, err)
	}
}

// thueMorse is the Thue-Morse word of length 2^k over lo and hi. Written in
// place of a run of the byte between them, it leaves a polynomial hash
// modulo 2^32 unchanged (for k ≥ 7): the Rabin-Karp hash of Go's
// strings.Index.
func thueMorse(k int, lo, hi byte) string {
	b := make([]byte, 1<<k)
	for i := range b {
		b[i] = lo
		if bits.OnesCount(uint(i))%2 == 1 {
			b[i] = hi
		}
	}
	return string(b)
}

// contains() is linear in its strings whatever they are, as its charge
// says. Go's strings.Index is not, for a needle over 64 bytes: it compares
// each window whose hash equals the needle's whole, and a sender who writes
// both strings chooses a needle whose hash every window shares (found while
// fixing review helper-140: this evaluation ran 2.6 s before CEL's charge,
// len(s)/10 × len(sub)/10, refused it; with strings.Contains charged
// (len(s)+len(sub))/10+1 it ran 3.1 s within the limit).
func TestContainsAdversarialNeedleIsLinear(t *testing.T) {
	tail := thueMorse(8, 'a', 'c')
	for _, c := range []struct {
		name         string
		hay, needle  string
		wantContains bool
	}{
		{"hash collision", strings.Repeat("b", 700_000), strings.Repeat("b", 300_000-len(tail)) + tail, false},
		{"period 16", strings.Repeat("xabcdefghijklmno", 40_000), strings.Repeat("xabcdefghijklmno", 20_000) + "!", false},
		{"found at the end", strings.Repeat("b", 700_000) + tail, strings.Repeat("b", 300_000-len(tail)) + tail, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			body, err := json.Marshal(map[string]string{"log": c.hay, "needle": c.needle})
			if err != nil {
				t.Fatal(err)
			}
			expr := `payload.log.contains(payload.needle)`
			ok, took, err := timedMatch(t, string(body), expr)
			t.Logf("%s over a %d-byte body: %v (match=%v, err=%v)", expr, len(body), took, ok, err)
			if ok != c.wantContains || err != nil {
				t.Errorf("%s: matched=%v, err=%v; want %v, no error", expr, ok, err, c.wantContains)
			}
			if took > 100*time.Millisecond {
				t.Errorf("%s over a %d-byte body: took %v; want one linear pass (a few ms)", expr, len(body), took)
			}
		})
	}
}
