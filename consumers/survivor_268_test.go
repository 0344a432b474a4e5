package consumers_test

import (
	"strings"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/consumers"
)

// TestSurvivor268_LeaseExtendUnderASecondIsAProblem (mutation tester
// helper-268).
// Guarantee: consumer.lease_extend is range-checked by the section ("must be
// at least 1s"), so inlet config check (and every service starting on the
// file) reports a sub-second value, naming the key, instead of passing it
// with exit 0.
// Mutant: consumers/section.go:134, Section.Validate:
// `if s.LeaseExtend < time.Second {` -> `if s.LeaseExtend < time.Millisecond {`
// (500ms accepted).
// Why existing tests missed it: the "tiny lease" case of
// TestConfigValidate checks consumers.Config (whose own floor is 30ms) with
// 1ms, which both floors refuse; nothing checks Section at its boundary.
func TestSurvivor268_LeaseExtendUnderASecondIsAProblem(t *testing.T) {
	t.Parallel()
	for d, ok := range map[time.Duration]bool{
		500 * time.Millisecond:        false,
		time.Second - time.Nanosecond: false,
		100 * time.Millisecond:        false,
		time.Second:                   true,
		30 * time.Second:              true,
	} {
		s := consumers.Section{LeaseExtend: d}.WithDefaults()
		err := s.Validate()
		switch {
		case ok && err != nil:
			t.Errorf("consumer.lease_extend %s: %v, want it accepted", d, err)
		case !ok && (err == nil || !strings.HasPrefix(err.Error(), "consumer.lease_extend")):
			t.Errorf("consumer.lease_extend %s: error %v, want a problem naming consumer.lease_extend (at least 1s)", d, err)
		}
	}
}
