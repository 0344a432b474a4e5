package consumers_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/inlet-dev/inlet/consumers"
)

func TestErrorClasses(t *testing.T) {
	t.Parallel()
	base := errors.New("boom")
	cases := []struct {
		name      string
		err       error
		class     consumers.ErrorClass
		permanent bool
	}{
		{"nil", nil, "", false},
		{"plain", base, consumers.ClassHandlerError, false},
		{"deadline", fmt.Errorf("call: %w", context.DeadlineExceeded), consumers.ClassTimeout, false},
		{"with class", consumers.WithClass(base, consumers.ClassHTTP5xx), consumers.ClassHTTP5xx, false},
		{"wrapped class", fmt.Errorf("forward: %w", consumers.WithClass(base, consumers.ClassNetwork)), consumers.ClassNetwork, false},
		{"unknown class", consumers.WithClass(base, "customer_said_no"), consumers.ClassHandlerError, false},
		{"permanent", consumers.Permanent(base), consumers.ClassPermanent, true},
		{"wrapped permanent", fmt.Errorf("x: %w", consumers.Permanent(base)), consumers.ClassPermanent, true},
		{"outer class wins", consumers.WithClass(consumers.Permanent(base), consumers.ClassHTTP4xx), consumers.ClassHTTP4xx, true},
		{"outer permanent wins", consumers.Permanent(consumers.WithClass(base, consumers.ClassHTTP4xx)), consumers.ClassPermanent, true},
	}
	for _, c := range cases {
		if got := consumers.ClassOf(c.err); got != c.class {
			t.Errorf("%s: ClassOf = %q, want %q", c.name, got, c.class)
		}
		if got := consumers.IsPermanent(c.err); got != c.permanent {
			t.Errorf("%s: IsPermanent = %v, want %v", c.name, got, c.permanent)
		}
		if c.err != nil && c.err != base && !errors.Is(c.err, base) && c.name != "deadline" {
			t.Errorf("%s: does not wrap the original error", c.name)
		}
	}
	if consumers.Permanent(nil) != nil || consumers.WithClass(nil, consumers.ClassPanic) != nil {
		t.Error("Permanent(nil) or WithClass(nil) is not nil")
	}
	if got := consumers.WithClass(base, consumers.ClassPanic).Error(); got != "boom" {
		t.Errorf("WithClass changed the text: %q", got)
	}
}

func TestClassesIsTheFixedList(t *testing.T) {
	t.Parallel()
	want := []consumers.ErrorClass{"handler_error", "timeout", "panic", "permanent", "http_4xx", "http_5xx", "network", "event_missing", "lease_expired", "transaction"}
	got := consumers.Classes()
	if !slices.Equal(got, want) {
		t.Fatalf("Classes() = %v, want %v", got, want)
	}
	got[0] = "mutated"
	if consumers.Classes()[0] != "handler_error" {
		t.Fatal("Classes() returned its own backing array")
	}
	for _, c := range want {
		if consumers.ClassOf(consumers.WithClass(errors.New("x"), c)) != c {
			t.Errorf("WithClass(%q) did not keep the class", c)
		}
	}
}
