package main

import (
	"errors"
	"strings"
	"testing"

	"github.com/inlet-dev/inlet/ingress/sources"
	"github.com/inlet-dev/inlet/ingress/verify"
	"github.com/inlet-dev/inlet/inletyaml"
)

// Backfill and reconcile store what the provider's API lists under the
// provider's event id; a source that ingress keys by an id of its own
// choosing would get every event that arrived by webhook stored again (a
// review found it). Such a source is refused, naming the setting; one that
// names the provider's own id is not.
func TestBackfillRefusesSourcesKeyedByTheirOwnID(t *testing.T) {
	for _, c := range []struct {
		src  verify.Config
		kind string
		want string // "" when accepted
	}{
		{verify.Config{Type: "stripe"}, "stripe", ""},
		{verify.Config{Type: "stripe", EventIDJSON: "id"}, "stripe", ""},
		{verify.Config{Type: "stripe", EventIDJSON: "data.object.id"}, "stripe", "event_id_json"},
		{verify.Config{Type: "stripe", EventIDHeader: "X-Request-Id"}, "stripe", "event_id_header"},
		{verify.Config{Type: "github"}, "github", ""},
		{verify.Config{Type: "github", EventIDHeader: "x-github-delivery"}, "github", ""},
		{verify.Config{Type: "github", EventIDHeader: "X-GitHub-Hook-ID"}, "github", "event_id_header"},
		{verify.Config{Type: "github", EventIDJSON: "hook_id"}, "github", "event_id_json"},
		// A type from a header the API does not return is refused; one
		// from the body (event_type_json) is read from the API's copy.
		{verify.Config{Type: "stripe", EventTypeHeader: "X-Kind"}, "stripe", "event_type_header"},
		{verify.Config{Type: "github", EventTypeHeader: "X-Kind"}, "github", "event_type_header"},
		{verify.Config{Type: "github", EventTypeHeader: "x-github-event"}, "github", ""},
		{verify.Config{Type: "stripe", EventTypeJSON: "data.object.object"}, "stripe", ""},
	} {
		cfg := inletyaml.Config{Sources: []sources.Source{{Name: "src", Config: c.src}}}
		for _, name := range []string{"", "src"} {
			_, err := backfillSource(cfg, c.kind, name, "inlet.yaml")
			switch {
			case c.want == "" && err != nil:
				t.Errorf("%+v (--source %q): %v; want accepted", c.src, name, err)
			case c.want != "" && (!errors.Is(err, errUsage) || !strings.Contains(err.Error(), c.want)):
				t.Errorf("%+v (--source %q): %v; want a usage error naming %s", c.src, name, err, c.want)
			}
		}
	}
}
