package inletyaml_test

import (
	"errors"
	"testing"

	"github.com/inlet-dev/inlet/inletyaml"
	"github.com/inlet-dev/inlet/internal/config"
)

// TestProblemsNameTheKeyThatIsWrong (review helper-223, fixed; this
// describes the code before the fix).
//
// Defect: docs/configuration.md promises each problem as
// `FILE:LINE: key.path: message` with the key path in YAML terms, and the
// brief's "bad input gets a clear error naming the option". internal/config
// (problem.go: splitPath and its leadingPath regexp) cuts the key path out of
// a section's validation message by the pattern [a-z_][a-z0-9_]*, so:
//   - a silence.max_silence key that is a source name with '-' (sources
//     allow it: "stripe-eu") or a capital is cut at that character: the
//     problem names the key silence.max_silence.stripe (which is not in the
//     file) with the message "-eu: 0s must be positive", on the line of
//     max_silence, not of the key (monitor/section.go Validate's message is
//     split there);
//   - audit.grace negative is reported as `audit.seal_every: and
//     audit.grace: must not be negative` on the line of seal_every, naming
//     a key that is fine (audit/section.go Validate names two keys in one
//     message, and splitPath takes the first).
//
// Setup: inletyaml.Parse of small files with one bad value each.
// Expected: the problem's path is the bad key, its line the bad key's line.
// Observed: path "silence.max_silence.stripe" line 6 (key on line 7);
// path "audit.seal_every" line 2 (grace on line 3).
// Fixed by: config.KeyError, a validation error that carries its key path
// (monitor.Section.Validate returns one for a max_silence entry), and a
// path read from a message's text whose segments after the first may hold
// '-' and capitals; audit.Section.Validate names seal_every or grace,
// whichever is negative.
func TestProblemsNameTheKeyThatIsWrong(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, yaml, path string
		line             int
	}{
		{"max_silence of a source named with a dash", "sources:\n  - name: stripe-eu\n    type: stripe\n    secrets: [whsec_abcdefabcdefabcdef]\nsilence:\n  max_silence:\n    stripe-eu: 0s\n",
			"silence.max_silence.stripe-eu", 7},
		{"negative audit.grace", "audit:\n  seal_every: 10s\n  grace: -1s\n", "audit.grace", 3},
		{"max_silence of a key with capitals", "silence:\n  max_silence:\n    Stripe: -1s\n", "silence.max_silence.Stripe", 3},
		{"negative audit.seal_every", "audit:\n  seal_every: -10s\n  grace: 1s\n", "audit.seal_every", 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := inletyaml.Parse([]byte(c.yaml), func(string) (string, bool) { return "", false })
			var ps *config.Problems
			if !errors.As(err, &ps) || len(ps.List) != 1 {
				t.Fatalf("want one problem, got %v", err)
			}
			if p := ps.List[0]; p.Path != c.path || p.Line != c.line {
				t.Fatalf("problem at line %d, key %q (%q); want line %d, key %q:\n%s", p.Line, p.Path, p.Message, c.line, c.path, c.yaml)
			}
		})
	}
}
