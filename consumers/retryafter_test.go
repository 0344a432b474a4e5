package consumers_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/consumers"
	"github.com/inlet-dev/inlet/consumers/internal/consumertest"
)

// TestRetryAfterHoldsTheRetryBack: a handler's RetryAfter schedules the
// retry no sooner than it asked (not the 30 s of the first backoff), a
// shorter one leaves the backoff's delay, and a Permanent error wrapped in
// it still dead-letters at once.
func TestRetryAfterHoldsTheRetryBack(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.start(t, b.config(
		consumers.Handler{Name: "later", Func: func(context.Context, *consumers.Event) error {
			return consumers.RetryAfter(consumers.WithClass(errors.New("429 from the service"), consumers.ClassHTTP4xx), 2*time.Hour)
		}},
		consumers.Handler{Name: "sooner", Func: func(context.Context, *consumers.Event) error {
			return consumers.RetryAfter(errors.New("503 from the service"), time.Second)
		}},
		consumers.Handler{Name: "never", Func: func(context.Context, *consumers.Event) error {
			return consumers.Permanent(consumers.RetryAfter(errors.New("410 from the service"), time.Hour))
		}},
	))
	b.StartStreamer(t, consumertest.StreamerOptions{})
	ev := b.InsertEvent(t, consumertest.EventParams{})
	later, sooner, never := b.JobID(t, ev, "later"), b.JobID(t, ev, "sooner"), b.JobID(t, ev, "never")

	start := time.Now()
	j := b.WaitJobStatus(t, later, "failed", wait)
	if in := j.NextAttemptAt.Sub(start); in < 2*time.Hour-time.Minute || in > 2*time.Hour+time.Minute {
		t.Errorf("RetryAfter 2h: next attempt in %s, want 2h", in)
	}
	if j.LastErrorClass == nil || *j.LastErrorClass != string(consumers.ClassHTTP4xx) {
		t.Errorf("class %v, want the handler's http_4xx", j.LastErrorClass)
	}
	j = b.WaitJobStatus(t, sooner, "failed", wait)
	// DefaultBackoff(1) is 30 s ±20 %.
	if in := j.NextAttemptAt.Sub(start); in < 20*time.Second || in > 40*time.Second {
		t.Errorf("RetryAfter 1s under a 30s backoff: next attempt in %s, want the backoff's 24–36s", in)
	}
	b.WaitJobStatus(t, never, "dead_letter", wait)
	if got := b.Outcomes(t, never); !slices.Equal(got, []string{"dead_letter"}) {
		t.Errorf("a Permanent error under RetryAfter: attempts %v, want [dead_letter]", got)
	}
}
