package inletyaml

import (
	"testing"

	"github.com/inlet-dev/inlet/internal/config"
)

// TestReconcileSourceMustBeAConfiguredSource (review helper-141, fixed; this describes the code before the fix):
// reconcile.sources[].source is documented as "a name of sources:"
// (inlet.example.yaml, backfill.ReconcileSource.Source) and its type must be
// that source's provider, but neither is checked: `inlet config check` says
// ok, and inlet streamer's scheduled reconcile then stores every event the
// provider's API lists under that name. A typo ("strpe") finds none of the
// webhooks already stored under "stripe" (the dedupe key is provider +
// event id), so every listed event is stored a second time, under a source
// that does not exist, and delivered again to every handler subscribed to
// "*"; a type that is not the source's (type stripe for a github source)
// stores Stripe's events as that GitHub source's. The one-shot commands
// refuse exactly these (cmd/inlet/backfill.go:143 backfillSource: "no
// source %q in ...", "source %q is of type %s, not %s"); the schedule's
// check (inletyaml/inletyaml.go:126-140, Config.Validate) only looks at a
// source that matches, and skips a name that matches none.
//
// Now: a problem naming reconcile.sources[i].source when no source of
// sources: has that name, or when that source's type is not the reconcile
// type.
func TestReconcileSourceMustBeAConfiguredSource(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ what, doc string }{
		{"a name no source has (a typo of stripe)",
			"sources:\n  - {name: stripe, type: stripe, secrets: [whsec_x]}\n" +
				"reconcile: {enabled: true, sources: [{source: strpe, type: stripe, api_key: rk_test_x}]}\n"},
		{"a source of another type (github) reconciled from Stripe's API",
			"sources:\n  - {name: gh, type: github, secrets: [ghsecret]}\n" +
				"reconcile: {enabled: true, sources: [{source: gh, type: stripe, api_key: rk_test_x}]}\n"},
	} {
		if got := problems(t, c.doc, env(nil), config.AllSections); len(got) == 0 {
			t.Errorf("reconcile of %s: inlet config check says ok; want a problem naming reconcile.sources[0].source", c.what)
		}
	}
	// The control: a reconcile of a configured source of its own type is fine.
	ok := "sources:\n  - {name: stripe, type: stripe, secrets: [whsec_x]}\n" +
		"reconcile: {enabled: true, sources: [{source: stripe, type: stripe, api_key: rk_test_x}]}\n"
	if got := problems(t, ok, env(nil), config.AllSections); len(got) != 0 {
		t.Fatalf("control: %q; want no problem", got)
	}
}
