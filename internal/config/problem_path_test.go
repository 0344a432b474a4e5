package config

import (
	"errors"
	"fmt"
	"testing"
)

// A validation error names its key path either as a *KeyError or at the
// start of its text; a map key below the top level may hold '-' and
// capitals (review helper-223).
func TestProblemOfReadsTheWholeKeyPath(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		err        error
		path, rest string
	}{
		{errors.New("streamer.wake: want notify"), "streamer.wake", "want notify"},
		{errors.New("sources[1].secrets[0]: empty"), "sources[1].secrets[0]", "empty"},
		{errors.New("silence.max_silence.stripe-eu: 0s must be positive"), "silence.max_silence.stripe-eu", "0s must be positive"},
		{errors.New("silence.max_silence.Stripe_EU: 0s must be positive"), "silence.max_silence.Stripe_EU", "0s must be positive"},
		{KeyErrorf("silence.max_silence.a:b", "%s must be positive", "0s"), "silence.max_silence.a:b", "0s must be positive"},
		// Wrapped, its text decides: the wrapper may name another key.
		{fmt.Errorf("reconcile.sources[0]: %w", KeyErrorf("token", "required")), "reconcile.sources[0]", "token: required"},
	} {
		if path, rest := problemOf(c.err); path != c.path || rest != c.rest {
			t.Errorf("problemOf(%q) = %q, %q; want %q, %q", c.err, path, rest, c.path, c.rest)
		}
	}
}
