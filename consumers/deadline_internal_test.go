package consumers

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// The deadline arithmetic saturates instead of wrapping: a Timeout or
// LeaseExtend near math.MaxInt64 ("no timeout") gave the lease up at the
// first extension tick and made txWaitBound negative (review helper-137;
// New now also refuses a Timeout over 24h).
func TestDeadlineArithmeticSaturates(t *testing.T) {
	t.Parallel()
	now := time.Now()
	if got := deadlineNanos(now); got != now.UnixNano() {
		t.Errorf("deadlineNanos(now) = %d, want %d", got, now.UnixNano())
	}
	if got := deadlineNanos(now.Add(math.MaxInt64)); got != math.MaxInt64 {
		t.Errorf("deadlineNanos(now + MaxInt64) = %d (%s), want math.MaxInt64", got, time.Unix(0, got))
	}
	if got := satAdd(time.Until(now.Add(math.MaxInt64)), recordTimeout+time.Second); got != math.MaxInt64 {
		t.Errorf("satAdd past the end = %s, want math.MaxInt64", got)
	}

	tx := func(timeout time.Duration, concurrency int) Handler {
		return Handler{TxFunc: func(context.Context, pgx.Tx, *Event) error { return nil }, Timeout: timeout, Concurrency: concurrency}
	}
	for _, c := range []struct {
		name  string
		cfg   Config
		slots int
		want  time.Duration
	}{
		{"honest queue", Config{LeaseExtend: 600 * time.Millisecond, Handlers: []Handler{tx(time.Second, 2)}}, 1, 43200 * time.Millisecond},
		{"no transactional handler", Config{LeaseExtend: time.Second, Handlers: []Handler{{Timeout: time.Second, Concurrency: 1}}}, 1, 0},
		{"huge timeout", Config{LeaseExtend: time.Second, Handlers: []Handler{tx(math.MaxInt64, 1)}}, 1, math.MaxInt64},
		{"huge lease extension", Config{LeaseExtend: math.MaxInt64, Handlers: []Handler{tx(time.Second, 1)}}, 1, math.MaxInt64},
		{"huge concurrency", Config{LeaseExtend: time.Second, Handlers: []Handler{tx(time.Hour, math.MaxInt), tx(time.Hour, math.MaxInt)}}, 1, math.MaxInt64},
	} {
		if got := txWaitBound(c.cfg, c.slots); got != c.want {
			t.Errorf("%s: txWaitBound = %s, want %s", c.name, got, c.want)
		}
	}
}
