package inletyaml

import (
	"testing"

	"github.com/inlet-dev/inlet/internal/config"
)

// Regression test for a defect found by review helper-94 (fixed; the text below
// describes the behaviour before the fix).
//
// TestAnEmptyTrailingYAMLDocumentIsAccepted: since e673620 a config file
// whose single document is followed by a bare `---` (a trailing document
// separator, as templating tools, `kubectl`-style concatenation and many
// editors' YAML snippets leave), or by `---` and only comments, is refused
// with "a second YAML document (after ---): put everything in one
// document" — every service then fails to start on a file that loaded
// before the change, though nothing after the `---` would be dropped.
//
// Expected: an empty document after `---` (nothing, only comments, or an
// explicit `...`) is accepted, as the rationale of the check (a second
// document's settings were dropped silently) does not apply; a second
// document with content is still refused.
// Root cause: internal/config/config.go Parse: any second dec.Decode that
// is not io.EOF is refused; yaml.v3 returns an empty DocumentNode (one null
// scalar) for a trailing `---`.
func TestAnEmptyTrailingYAMLDocumentIsAccepted(t *testing.T) {
	t.Parallel()
	body := `sources:
  - name: billing
    type: stripe
    secrets: [whsec_review_0123456789]
`
	for _, tail := range []string{"---\n", "---", "---\n# nothing more\n", "---\n...\n"} {
		c, err := ParseFor([]byte(body+tail), env(nil), config.AllSections)
		if err != nil {
			t.Errorf("config ending with %q: refused: %v; want it read (the document after --- is empty)", tail, err)
			continue
		}
		if _, ok := c.Source("billing"); !ok {
			t.Errorf("config ending with %q: source billing missing", tail)
		}
	}
}
