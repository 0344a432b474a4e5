package filter_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/filter"
)

// TestCountedRepetitionRegexRunsForSeconds (review helper-140, fixed; this
// describes the code before the fix): a literal matches() pattern with a
// counted repetition is charged by the length of its TEXT, but it runs in
// time proportional to its COMPILED PROGRAM. cel-go charges matches
// (text/10+1) × (pattern bytes × 0.25) (common/cost/standard.go,
// overloads.MatchesString), and deepCost passes matches through to that
// charge. `\S{500}` is 6 bytes (a charge of 1.5 per 10 bytes of text:
// ~156,000 units for a 1 MiB text, half the cost limit) but RE2 compiles it
// to ~500 instructions and, unanchored, Go's regexp runs its NFA with up to
// 500 live threads on every byte: ~2.9 s of CPU (without -race; more under
// -race) for ONE evaluation that ends with no error. The CEL context
// interrupt (MatchContext's deadline) is only checked between comprehension
// steps, so the regex also runs past ingress's store_timeout: the webhook is
// answered 503 and the provider retries, burning the same seconds each time.
// And since CEL charges a call after it returns, a pattern whose charge is
// OVER the limit (e.g. `(?i)[a-z]{256}` on the same text: ~1.2 s) still runs
// to the end before the limit refuses it.
//
// filter.go's costLimit comment and the package doc promise "Each evaluation
// is bounded in cost ... since the payload is the sender's"; reviews 127-136
// each treated "an evaluation within the limit runs for seconds" as a defect.
//
// Now: an evaluation over a payload within MaxPayload finishes well under a
// second (the test allows 1 s), or is refused at once.
func TestCountedRepetitionRegexRunsForSeconds(t *testing.T) {
	// "a token of 500 or more non-space characters": a long word, a base64
	// blob, a pasted secret.
	f, err := filter.Compile(`payload.text.matches("\\S{500}")`)
	if err != nil {
		t.Fatal(err)
	}
	// 499 non-space bytes, then a space: every position keeps up to 499
	// threads alive and none reaches 500. Just under 1 MiB in all (3.7 s
	// without -race); under -race (~13x slower) a fifth of it, ~10 s.
	units := 2090
	if raceEnabled {
		units /= 5
	}
	text := strings.Repeat(strings.Repeat("a", 499)+" ", units)
	body := fmt.Sprintf(`{"text":%q}`, text)
	if len(body) > filter.MaxPayload {
		t.Fatalf("body is %d bytes, over MaxPayload", len(body))
	}
	payload := filter.ParsePayload([]byte(body))
	if payload == nil {
		t.Fatal("payload did not parse")
	}

	// ingress evaluates with the request's deadline; give it 300 ms.
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	ok, err := f.MatchContext(ctx, filter.Event{Source: "src", Type: "t", Payload: payload})
	took := time.Since(start)
	t.Logf("one evaluation over a %d-byte body: %v (match=%v, err=%v)", len(body), took, ok, err)
	if took > time.Second {
		t.Errorf("one evaluation of %s over a %d-byte payload took %v (the request's 300 ms deadline passed long before); want it bounded well under a second by the cost limit, or refused at once",
			f, len(body), took.Round(time.Millisecond))
	}
}

// A matches() in a comprehension is charged each call's program steps: the
// limit ends the evaluation after about 0.2 s of matching at worst (31
// million steps), however the calls divide it. Before the fix, 100 calls of
// \S{100} over a 20 KB text were charged 3,001 units each, 300,100 within
// the limit, and ran 1.2 s to a miss with no error.
func TestRegexInComprehensionChargedItsSteps(t *testing.T) {
	// Under -race (~13x slower) the same charge runs ~2.6 s: a fifth of
	// the text, the same number of calls.
	words := 200
	if raceEnabled {
		words /= 5
	}
	body := fmt.Sprintf(`{"text":%q,"items":[%s]}`,
		strings.Repeat(strings.Repeat("a", 99)+" ", words), strings.TrimSuffix(strings.Repeat("1,", 100), ","))
	expr := `payload.items.exists(i, payload.text.matches("\\S{100}"))`
	ok, took, err := timedMatch(t, body, expr)
	t.Logf("%s over a %d-byte body: %v (match=%v, err=%v)", expr, len(body), took, ok, err)
	if err == nil || !strings.Contains(err.Error(), "cost limit") {
		t.Errorf("%s over a %d-byte body: matched=%v, err=%v after %v; want it refused by the cost limit (100 calls of ~100 steps a byte)",
			expr, len(body), ok, err, took)
	}
	if !raceEnabled && took > time.Second {
		t.Errorf("%s over a %d-byte body: took %v; want it ended by the cost limit well under a second", expr, len(body), took)
	}
}

// TestPlainRegexOnLargePayloadMatches (review helper-140, fixed; this
// describes the code before the fix): CEL charged matches() by its
// pattern's length, a quarter of a unit a byte of pattern per tenth of text:
// the Jira key pattern [A-Z][A-Z0-9]+-[0-9]+ (21 bytes, 8 instructions)
// over a 1 MB log was charged ~525,000 units, over the limit, after ~30 ms of
// work: the filter missed the event it asked for.
//
// Now: it is charged by its program, 8 instructions (~80,000 units), and
// matches.
func TestPlainRegexOnLargePayloadMatches(t *testing.T) {
	line := "2026-12-01T10:00:00Z INFO worker-7 processed batch 123456 in 42ms\n"
	body := fmt.Sprintf(`{"log":%q}`, strings.Repeat(line, 1_000_000/len(line))+"deploy failed, see OPS-4711\n")
	for _, expr := range []string{
		`payload.log.matches("[A-Z][A-Z0-9]+-[0-9]+")`,
		`matches(payload.log, "[A-Z][A-Z0-9]+-[0-9]+")`,
	} {
		ok, took, err := timedMatch(t, body, expr)
		t.Logf("%s over a %d-byte body: %v", expr, len(body), took)
		if !ok || err != nil {
			t.Errorf("%s over a %d-byte body whose log names a ticket: matched=%v, err=%v; want a match", expr, len(body), ok, err)
		}
	}
}

// A bad pattern is refused at Compile with its position, as CEL's own
// compile errors are.
func TestRegexCompileErrorsNamePosition(t *testing.T) {
	for _, c := range []struct{ expr, want string }{
		{`payload.s.matches("a(")`, ":1:19: matches() pattern: error parsing regexp: missing closing )"},
		{"event.type == \"x\" &&\n  matches(payload.s, \"[z-a]\")", ":2:22: matches() pattern: error parsing regexp: invalid character class range"},
		{`payload.s.matches(payload.re)`, ":1:26: matches() takes a literal pattern only"},
	} {
		_, err := filter.Compile(c.expr)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Compile(%q): %v; want an error containing %q", c.expr, err, c.want)
		}
	}
}
