package consumers_test

import (
	"testing"
	"time"

	"github.com/inlet-dev/inlet/consumers"
)

func TestDefaultBackoff(t *testing.T) {
	t.Parallel()
	cases := []struct {
		attempt int
		base    time.Duration
	}{
		{-3, 30 * time.Second}, {0, 30 * time.Second}, {1, 30 * time.Second}, {2, time.Minute},
		{3, 2 * time.Minute}, {10, 30 * time.Second << 9}, {12, 30 * time.Second << 11},
		// At the cap: 20h ±20%, so the jitter is kept below 24h.
		{13, 20 * time.Hour}, {64, 20 * time.Hour}, {1 << 30, 20 * time.Hour},
	}
	for _, c := range cases {
		lo := time.Duration(float64(c.base) * 0.8)
		hi := min(time.Duration(float64(c.base)*1.2), 24*time.Hour)
		seen := map[time.Duration]bool{}
		for range 200 {
			d := consumers.DefaultBackoff(c.attempt)
			if d < lo || d > hi {
				t.Fatalf("DefaultBackoff(%d) = %s, want within [%s, %s]", c.attempt, d, lo, hi)
			}
			seen[d] = true
		}
		if len(seen) < 50 {
			t.Errorf("DefaultBackoff(%d): only %d distinct values in 200 draws: no jitter?", c.attempt, len(seen))
		}
	}
}
