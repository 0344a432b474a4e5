package consumers

import (
	"testing"
	"time"

	"golang.org/x/time/rate"
)

// A rate so low that the wait for the next token overflows int64
// nanoseconds is a wait longer than any lease (the job is given back), never
// a negative one, which made awaitToken spin holding its turn (noted by
// review helper-341).
func TestUntilTokenNeverNegative(t *testing.T) {
	now := time.Now()
	for _, r := range []rate.Limit{1e-12, 1e-10, 1e-9, 1, 1000} {
		lim := rate.NewLimiter(r, 1)
		lim.AllowN(now, 1) // the burst spent: the next token is 1/r away
		d := untilToken(lim, now)
		if d <= 0 {
			t.Errorf("rate %g: wait for the next token %s, want a positive wait", float64(r), d)
		}
		if want := time.Duration(float64(time.Second) / float64(r)); float64(r) >= 1e-9 && (d < want-time.Millisecond || d > want+time.Millisecond) {
			t.Errorf("rate %g: wait %s, want about %s", float64(r), d, want)
		}
	}
}
