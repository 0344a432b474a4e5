package admin_test

import (
	"testing"
	"time"

	"github.com/inlet-dev/inlet/admin"
)

// RelativeTime reads a bound as ParseTime does, surrounding spaces
// included: ' 7d' counts back from now for both (noticed by review
// helper-72: a backfill's --since ' 7d' was pinned as a fixed time, and its
// resume then refused as a different backfill).
func TestRelativeTimeAgreesWithParseTime(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		in       string
		relative bool
	}{{"7d", true}, {" 7d", true}, {"24h ", true}, {" 90m ", true}, {"2026-12-01", false}, {" 2026-12-01T00:00:00Z", false}} {
		got, err := admin.ParseTime(c.in, now)
		if err != nil {
			t.Fatalf("ParseTime(%q): %v", c.in, err)
		}
		if r := admin.RelativeTime(c.in); r != c.relative {
			t.Errorf("RelativeTime(%q) = %v, want %v (ParseTime gives %s)", c.in, r, c.relative, got)
		}
	}
}
