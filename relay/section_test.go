package relay_test

import (
	"strings"
	"testing"

	"github.com/inlet-dev/inlet/relay"
)

// relay.max_inflight_bytes defaults to 32 MiB, at least max_body_bytes, and
// a value below max_body_bytes is refused, naming both.
func TestSectionMaxInflightBytes(t *testing.T) {
	t.Parallel()
	if got := (relay.Section{}).WithDefaults().MaxInflightBytes; got != relay.DefaultMaxInflightBytes {
		t.Errorf("default max_inflight_bytes %d, want %d", got, relay.DefaultMaxInflightBytes)
	}
	if got := (relay.Section{MaxBodyBytes: 64 << 20}).WithDefaults().MaxInflightBytes; got != 64<<20 {
		t.Errorf("max_inflight_bytes with a 64 MiB max_body_bytes: %d, want 64 MiB", got)
	}
	err := relay.Section{MaxBodyBytes: 2 << 20, MaxInflightBytes: 1 << 20}.Validate()
	if err == nil || !strings.Contains(err.Error(), "relay.max_inflight_bytes") || !strings.Contains(err.Error(), "2097152") {
		t.Errorf("max_inflight_bytes below max_body_bytes: %v, want an error naming both", err)
	}
	if err := (relay.Section{MaxInflightBytes: 1 << 20}).Validate(); err != nil {
		t.Errorf("max_inflight_bytes of 1 MiB with the default max_body_bytes: %v", err)
	}
}
