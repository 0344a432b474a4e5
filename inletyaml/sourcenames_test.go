package inletyaml

import (
	"testing"

	"github.com/inlet-dev/inlet/internal/config"
)

// TestStreamerSourceNameFromUnsetVarIsNotEmpty: a source whose name
// comes from a ${VAR} the streamer's environment does not hold.
//
// Regression test (review helper-112; fixed: the text describes the
// behaviour before the fix). In 71054d4 (internal/config/config.go dropSections/nameOf with
// expand): `inlet streamer` now keeps each source's name so its silence
// detector watches the configured sources. But sources: is still a section
// the streamer does not "read" (droppedSections), so expand() turns a
// ${VAR} it is not given into null without a problem (config.go expand:
// service.Reads(topSection(path)) is false) and Validate's "name required"
// is skipped as related to an unset ref. nameOf then keeps that null name:
// the streamer starts with a source named "" and silently watches "" — the
// real source is never judged silent, and if it was silent its alert is
// closed with status "removed" (monitor/silence.go) although it is
// configured. Services are given only the variables of the sections they
// read (docs/configuration.md), so a streamer without SOURCE_NAME is the
// documented deployment.
//
// Expected: either the name is a value the streamer needs (an unset
// variable in a kept name is a problem, as in a section it reads), or a
// source whose name could not be resolved is not passed on as "" (e.g. keep
// no sources at all then: watch every source with an event, as a file
// without sources: does).
func TestStreamerSourceNameFromUnsetVarIsNotEmpty(t *testing.T) {
	t.Parallel()
	doc := "sources:\n  - {name: \"${STRIPE_SOURCE}\", type: stripe, secrets: [\"${STRIPE_SECRET}\"]}\n"
	// Ingress has both variables: the source is "stripe".
	ing, err := ParseFor([]byte(doc), env(map[string]string{"STRIPE_SOURCE": "stripe", "STRIPE_SECRET": "whsec_x"}), config.IngressService)
	if err != nil || len(ing.Sources) != 1 || ing.Sources[0].Name != "stripe" {
		t.Fatalf("ingress: %+v, %v", ing.Sources, err)
	}
	// The streamer is not given the sources' variables.
	st, err := ParseFor([]byte(doc), env(nil), config.StreamerService)
	if err != nil {
		return // refused with a problem naming the variable: fine
	}
	for i, s := range st.Sources {
		if s.Name == "" {
			t.Fatalf("streamer parsed without error, sources[%d] has the empty name (silence detector watches %q, not the configured source): %+v",
				i, s.Name, st.Sources)
		}
	}
}

// TestStreamerSourceNameThroughMergeKey: a source item built with a
// YAML merge key (<<: *base) whose name is in the merged mapping.
//
// Regression test (review helper-112; fixed: the text describes the
// behaviour before the fix). In 71054d4 (internal/config/config.go nameOf): nameOf follows an
// item that is an alias but only looks at the item's own "name" key; a
// name brought in by a merge key (<<: *anchor, which the full decode
// honours: ingress sees the name) is dropped, so the streamer gets a source
// named "" and its silence detector watches "" instead of the configured
// source (and closes that source's open silence alert as "removed").
//
// Expected: the streamer's source names equal the ones the other services
// decode from the same file.
func TestStreamerSourceNameThroughMergeKey(t *testing.T) {
	t.Parallel()
	doc := `sources:
  - &gh
    name: gh
    type: github
    secrets: ["s1"]
  - <<: *gh
    name: gh2
  - <<: {name: gh3, type: github, secrets: ["s3"]}
`
	all, err := ParseFor([]byte(doc), env(nil), config.IngressService)
	if err != nil {
		t.Fatalf("ingress: %v", err)
	}
	var want []string
	for _, s := range all.Sources {
		want = append(want, s.Name)
	}
	if len(want) != 3 || want[2] != "gh3" {
		t.Fatalf("ingress decoded %q", want)
	}
	st, err := ParseFor([]byte(doc), env(nil), config.StreamerService)
	if err != nil {
		t.Fatalf("streamer: %v", err)
	}
	var got []string
	for _, s := range st.Sources {
		got = append(got, s.Name)
	}
	if len(got) != len(want) {
		t.Fatalf("streamer sources %q, ingress %q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("streamer's source names %q differ from ingress's %q (same file): the silence detector watches the wrong names", got, want)
		}
	}
}
