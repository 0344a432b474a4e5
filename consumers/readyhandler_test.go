package consumers_test

import (
	"context"
	"strings"
	"testing"

	"github.com/inlet-dev/inlet/consumers"
	"github.com/inlet-dev/inlet/consumers/internal/consumertest"
)

// Regression test for a defect found by review helper-95 (fixed; the text below
// describes the behaviour before the fix).
//
// consumers.Section.Validate (what `inlet config check` and every
// service's config load run on consumer.handlers[]) does not check the
// provider and event_type globs, nor max_attempts' upper bound, while
// consumers.New (what `inlet consumer` / `inlet dev` call at start) rejects
// them. A file the config check accepts then fails at start, and the reason
// names keys that do not exist in the YAML ("handlers[0].patterns[0].provider",
// not "consumer.handlers[0].provider"). inletyaml.Validate already does this
// for `filter` ("inlet config check answers for the file as the services do"),
// but not for these keys.
//
// Expected: Section.Validate returns an error naming
// consumer.handlers[i].provider / .event_type / .max_attempts.
func TestReadyHandlerKeysCheckedAsAtStart(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		edit func(*consumers.ReadyHandler)
		key  string
	}{
		{"provider too long", func(h *consumers.ReadyHandler) { h.Provider = strings.Repeat("s", 300) }, "consumer.handlers[0].provider"},
		{"provider control char", func(h *consumers.ReadyHandler) { h.Provider = "stripe\x07" }, "consumer.handlers[0].provider"},
		{"event_type too long", func(h *consumers.ReadyHandler) { h.EventType = strings.Repeat("e", 300) }, "consumer.handlers[0].event_type"},
		{"max_attempts over int4", func(h *consumers.ReadyHandler) { h.MaxAttempts = 3_000_000_000 }, "consumer.handlers[0].max_attempts"},
	}
	b := consumertest.New(t) // a real database and bus, as inlet consumer has
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			h := consumers.ReadyHandler{Name: "audit", Type: "log"}
			c.edit(&h)
			s := consumers.Section{Handlers: []consumers.ReadyHandler{h}}.WithDefaults()
			cfgErr := s.Validate()

			// What `inlet consumer` does with the same entry at start
			// (cmd/inlet/pipeline.go: readyHandlers + consumers.New).
			rh := s.Handlers[0]
			_, startErr := consumers.New(consumers.Config{
				Pool: b.Worker, Subscriber: b.Bus,
				Handlers: []consumers.Handler{rh.Handler(func(context.Context, *consumers.Event) error { return nil })},
			})
			if startErr == nil {
				t.Skipf("consumers.New accepts it too: not a mismatch")
			}
			if cfgErr == nil {
				t.Fatalf("config check accepts the entry, but the service refuses to start with: %v", startErr)
			}
			if !strings.Contains(cfgErr.Error(), c.key) {
				t.Errorf("config error %q does not name %s", cfgErr, c.key)
			}
		})
	}
}
