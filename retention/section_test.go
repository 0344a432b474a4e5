package retention_test

import (
	"testing"
	"time"

	"github.com/inlet-dev/inlet/retention"
)

func TestParseAge(t *testing.T) {
	t.Parallel()
	const day = 24 * time.Hour
	for in, want := range map[string]time.Duration{"90d": 90 * day, "13w": 91 * day, "36h": 36 * time.Hour, "0": 0} {
		if got, err := retention.ParseAge(in); err != nil || got != want {
			t.Errorf("ParseAge(%q) = %s, %v; want %s", in, got, err, want)
		}
	}
	for _, in := range []string{"", "d", "-1d", "1.5d", "ninety days", "-5h"} {
		if _, err := retention.ParseAge(in); err == nil {
			t.Errorf("ParseAge(%q) succeeded", in)
		}
	}
}
