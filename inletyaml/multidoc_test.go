package inletyaml

import (
	"testing"

	"github.com/inlet-dev/inlet/internal/config"
)

// Regression test for a defect found by review helper-92 (fixed; the
// text below describes the behaviour before the fix).
//
// TestASecondYAMLDocumentIsRefused: a config file holding more
// than one YAML document (`---` between them, as Kubernetes manifests and
// many concatenated files do) is read only up to the first: everything
// after the `---` — here a source and a malformed streamer.poll_interval —
// is dropped without a word, so `inlet config check` says "ok" and the
// services start without the source (its webhooks get 404) and without the
// operator's settings. docs/configuration.md promises the check finds
// "unknown keys ..., values of the wrong type, settings out of range" and
// lists every problem; here the bad value is accepted silently.
//
// Root cause: internal/config/config.go Parse: `yaml.Unmarshal(b, &root)`
// decodes only the first document of b, and nothing checks for more.
//
// Expected: a problem such as `FILE:4: a second YAML document (---): inlet
// reads one; merge them`. Suggested fix: decode with yaml.NewDecoder(b) and
// report a problem when a second Decode does not return io.EOF.
func TestASecondYAMLDocumentIsRefused(t *testing.T) {
	t.Parallel()
	doc := `streamer:
  batch_size: 100
---
streamer:
  poll_interval: 1sec
sources:
  - name: billing
    type: stripe
    secrets: [whsec_review_0123456789]
`
	c, err := ParseFor([]byte(doc), env(nil), config.AllSections)
	if err == nil {
		_, found := c.Source("billing")
		t.Errorf("a file with a second YAML document was accepted (source billing configured: %v; "+
			"streamer.poll_interval \"1sec\" not refused): want a problem naming the second document", found)
	}
}
