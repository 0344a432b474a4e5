package consumers

import (
	"math/rand/v2"
	"time"
)

const (
	backoffBase = 30 * time.Second
	backoffCap  = 24 * time.Hour
)

// DefaultBackoff is the delay before the retry that follows failed attempt
// attempt (1-based): 30s·2^(attempt-1), jittered by ±20% so jobs that failed
// together do not retry together, and capped at 24h.
func DefaultBackoff(attempt int) time.Duration {
	d := backoffCap
	// 30s·2^12 already exceeds the cap; stop shifting before it overflows.
	if n := max(attempt, 1) - 1; n < 12 {
		d = backoffBase << n
	}
	jitter := 0.8 + 0.4*rand.Float64() //nolint:gosec // G404: backoff jitter, not a secret
	return min(time.Duration(float64(d)*jitter), backoffCap)
}
