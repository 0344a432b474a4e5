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
// together do not retry together, and at most 24h: where 30s·2^(attempt-1)
// plus its jitter would pass 24h (attempt 13 on), the delay is drawn from
// 16h–24h instead, so retries stay spread at the cap too.
func DefaultBackoff(attempt int) time.Duration {
	const top = backoffCap * 5 / 6 // ×1.2 = the cap
	d := time.Duration(top)
	// 30s·2^12 already exceeds the cap; stop shifting before it overflows.
	if n := max(attempt, 1) - 1; n < 12 {
		d = min(backoffBase<<n, top)
	}
	jitter := 0.8 + 0.4*rand.Float64() //nolint:gosec // G404: backoff jitter, not a secret
	return min(time.Duration(float64(d)*jitter), backoffCap)
}
