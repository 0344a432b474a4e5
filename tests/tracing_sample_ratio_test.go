package tests

import (
	"strings"
	"testing"

	"github.com/inlet-dev/inlet/inletyaml"
)

// TestTracingSampleRatioZeroTracesNone (review helper-261, fixed; this
// describes the code before the fix).
//
// Defect: `tracing.sample_ratio` is "the share of webhooks traced"
// (inlet.example.yaml; docs/configuration.md's table: default 1), whose
// range the check itself states as (0, 1] ("tracing.sample_ratio: 2 must be
// in (0, 1]"). A file with `sample_ratio: 0` — an operator turning sampling
// down to nothing, keeping the endpoint — passes `inlet config check`
// ("ok") and every service then traces EVERY webhook: WithDefaults
// (internal/tracing/section.go Section.WithDefaults, cmp.Or) takes the 0 for
// "unset" and makes it 1 before Validate sees it, so the value written is
// inverted silently (the service logs `tracing on sample_ratio=1`). Other
// keys say what 0 means ("0: none", "0 or unset: 1"); this one says nothing,
// and its stated range excludes 0.
//
// Setup: an inlet.yaml with tracing {otlp_endpoint, sample_ratio: 0}; run
// `inlet config check` on it, and load it as the services do
// (inletyaml.Load).
//
// Expected: either the check refuses 0 as out of its documented range
// (exit 1, naming tracing.sample_ratio), or the services sample nothing.
//
// Observed: `inlet config check` exits 0 ("ok") and the loaded
// tracing.sample_ratio is 1: every webhook is traced.
//
// Fixed by helper-263: SampleRatio is a *float64 (nil: 1), so an explicit 0
// reaches Validate, whose range is now [0, 1], and is honoured: none of the
// traces Inlet starts is sampled (the ParentBased sampler still follows a
// sampled parent, an event traced before); a negative or > 1 value is
// refused naming the key.
func TestTracingSampleRatioZeroTracesNone(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := writeFile(t, dir, "inlet.yaml", "database_url: postgres://tracing@127.0.0.1:1/none\n"+
		"tracing:\n  otlp_endpoint: http://127.0.0.1:4318\n  sample_ratio: 0\n")
	out, errOut, code := runInlet(t, cleanEnv(), "config", "check", "--config", cfg)
	if code != 0 {
		if !strings.Contains(out+errOut, "tracing.sample_ratio") {
			t.Fatalf("inlet config check refused the file (exit %d) without naming tracing.sample_ratio:\n%s%s", code, out, errOut)
		}
		return // refused, naming the key: fixed
	}
	c, err := inletyaml.Load(cfg)
	if err != nil {
		t.Fatalf("inlet config check said ok (%q), but the file does not load: %v", strings.TrimSpace(out), err)
	}
	if c.Tracing.SampleRatio == nil || *c.Tracing.SampleRatio != 0 {
		t.Errorf("tracing.sample_ratio: 0 passes `inlet config check` (exit 0: %q) and the services load it as %g: "+
			"every webhook is traced, where the file asked for none (0: none)",
			strings.TrimSpace(out), c.Tracing.Ratio())
	}
}
