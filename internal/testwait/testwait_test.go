package testwait_test

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/internal/testwait"
)

// recorder stands in for *testing.T to see a helper fail.
type recorder struct {
	testing.TB
	failed string
}

func (r *recorder) Helper() {}
func (r *recorder) Fatalf(format string, args ...any) {
	r.failed = fmt.Sprintf(format, args...)
	panic(r)
}

func run(f func(tb testing.TB)) (failed string) {
	r := &recorder{}
	defer func() {
		if p := recover(); p != nil && p != any(r) {
			panic(p)
		}
		failed = r.failed
	}()
	f(r)
	return ""
}

func TestEventuallyReturnsOnceTheCheckHolds(t *testing.T) {
	t.Parallel()
	var n atomic.Int32
	time.AfterFunc(30*time.Millisecond, func() { n.Store(3) }) // something happening later, elsewhere
	start := time.Now()
	testwait.Eventually(t, 5*time.Second, "n is 3", func() (bool, string) {
		v := n.Load()
		return v == 3, fmt.Sprint(v)
	})
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("returned %s after the check held", took)
	}
}

func TestEventuallyFailsWithWhatItLastSaw(t *testing.T) {
	t.Parallel()
	calls := 0
	msg := run(func(tb testing.TB) {
		testwait.Eventually(tb, 50*time.Millisecond, "the job completed", func() (bool, string) {
			calls++
			return false, fmt.Sprintf("status pending (check %d)", calls)
		})
	})
	want := fmt.Sprintf("not within 50ms: the job completed; last saw: status pending (check %d)", calls)
	if msg != want || calls < 2 {
		t.Fatalf("failed with %q after %d checks, want %q", msg, calls, want)
	}
}

func TestConsistentlyWaitsOutTheWindow(t *testing.T) {
	t.Parallel()
	start := time.Now()
	calls := 0
	testwait.Consistently(t, 120*time.Millisecond, "nothing happens", func() (bool, string) {
		calls++
		return true, ""
	})
	if took := time.Since(start); took < 120*time.Millisecond || calls < 2 {
		t.Fatalf("returned after %s and %d checks, want the whole 120ms window checked along the way", took, calls)
	}
}

func TestConsistentlyFailsAsSoonAsTheCheckBreaks(t *testing.T) {
	t.Parallel()
	calls := 0
	start := time.Now()
	msg := run(func(tb testing.TB) {
		testwait.Consistently(tb, 10*time.Second, "no extra call", func() (bool, string) {
			calls++
			return calls < 3, fmt.Sprintf("%d calls", calls)
		})
	})
	if !strings.Contains(msg, "no extra call no longer held; saw: 3 calls") || time.Since(start) > 5*time.Second {
		t.Fatalf("failed with %q after %s", msg, time.Since(start))
	}
}
