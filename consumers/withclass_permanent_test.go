package consumers_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/inlet-dev/inlet/consumers"
	"github.com/inlet-dev/inlet/consumers/internal/consumertest"
)

// TestWithClassPermanentIsDeadLettered (review helper-221, fixed).
// Defect: WithClass(err, ClassPermanent), the natural spelling for a
// developer who reads the class list ("ClassPermanent: the handler said
// retrying cannot help", errors.go), records the attempt with class
// permanent but does not dead-letter the job: it is retried with backoff up
// to MaxAttempts, each attempt recorded as "permanent". Operators then see
// jobs failed/retrying with last_error_class 'permanent', a contradiction,
// and the downstream gets the call it refused again and again. Root cause:
// consumers/errors.go IsPermanent looks only for a *permanentError, while
// ClassOf (what is recorded) accepts a *classError carrying ClassPermanent;
// attempt.go record decides the retry on IsPermanent.
// Setup: a Func handler returning WithClass(errors.New(…), ClassPermanent),
// MaxAttempts 3, no backoff.
// Expected: dead_letter after attempt 1, history [dead_letter] (as
// Permanent(err) does), or New/WithClass refusing the class.
// Observed: history [failed failed dead_letter], every attempt class
// permanent.
// Fixed: WithClass(err, ClassPermanent) returns Permanent(err), so
// IsPermanent reports it and the job is dead-lettered after the attempt;
// documented on WithClass and IsPermanent.
func TestWithClassPermanentIsDeadLettered(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.start(t, b.config(consumers.Handler{Name: "mailer", MaxAttempts: 3, Backoff: noBackoff,
		Func: func(context.Context, *consumers.Event) error {
			return consumers.WithClass(errors.New("410 Gone: the recipient no longer exists"), consumers.ClassPermanent)
		}}))
	b.StartStreamer(t, consumertest.StreamerOptions{})
	id := b.JobID(t, b.InsertEvent(t, consumertest.EventParams{}), "mailer")
	j := b.WaitJobStatus(t, id, "dead_letter", wait)
	var hist []string
	for _, a := range b.Attempts(t, id) {
		hist = append(hist, a.Outcome+"/"+deref(a.ErrorClass))
	}
	if j.AttemptCount != 1 {
		t.Fatalf("an error of class permanent (WithClass(err, ClassPermanent)) was retried: dead-lettered on attempt %d, history %v; want dead_letter on attempt 1",
			j.AttemptCount, hist)
	}
}

// WithClass(err, ClassPermanent) is Permanent(err) wherever it sits in the
// chain, and keeps the error it wraps and its text.
func TestWithClassPermanentIsPermanent(t *testing.T) {
	t.Parallel()
	base := errors.New("410 Gone")
	for name, err := range map[string]error{
		"as is":       consumers.WithClass(base, consumers.ClassPermanent),
		"wrapped":     fmt.Errorf("send: %w", consumers.WithClass(base, consumers.ClassPermanent)),
		"outer class": consumers.WithClass(consumers.WithClass(base, consumers.ClassPermanent), consumers.ClassHTTP4xx),
	} {
		if !consumers.IsPermanent(err) {
			t.Errorf("%s: IsPermanent = false, want true", name)
		}
		if !errors.Is(err, base) {
			t.Errorf("%s: does not wrap the original error", name)
		}
	}
	if got := consumers.ClassOf(consumers.WithClass(base, consumers.ClassPermanent)); got != consumers.ClassPermanent {
		t.Errorf("ClassOf(WithClass(err, ClassPermanent)) = %q, want %q", got, consumers.ClassPermanent)
	}
	if got := consumers.ClassOf(consumers.WithClass(consumers.WithClass(base, consumers.ClassPermanent), consumers.ClassHTTP4xx)); got != consumers.ClassHTTP4xx {
		t.Errorf("an outer class: ClassOf = %q, want %q", got, consumers.ClassHTTP4xx)
	}
	if got := consumers.WithClass(base, consumers.ClassPermanent).Error(); got != "410 Gone" {
		t.Errorf("WithClass(ClassPermanent) changed the text: %q", got)
	}
	if consumers.WithClass(nil, consumers.ClassPermanent) != nil {
		t.Error("WithClass(nil, ClassPermanent) is not nil")
	}
}
