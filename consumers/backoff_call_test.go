package consumers_test

import (
	"context"
	"errors"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/consumers"
	"github.com/inlet-dev/inlet/consumers/internal/consumertest"
)

// Defect: the SDK calls Handler.Backoff, the program's own code, outside any
// recover (record, attempt.go: `retryIn := max(h.Backoff(ref.Attempt), 0)`),
// and calls it even when no retry follows: on the job's last attempt and for
// a Permanent error. Handler.Backoff is documented as "the delay before the
// retry that follows failed attempt n", so a schedule table covering the
// retries only (len = MaxAttempts-1, the natural way to write one) is
// correct by the docs — yet on the last attempt the SDK indexes past it and
// the panic, on the attempt's goroutine, kills the whole consumer process
// (every handler's attempts in flight with it). The job's lease then
// expires, the reaper counts the attempt and another replica gets it and
// crashes in turn. The SDK already guards the other user code it calls
// outside the handler (Error methods: safeErrorString; typed nils;
// runtime.Goexit) for exactly this reason.
//
// Expected: the last attempt's failure dead-letters the job and the process
// keeps running.
//
// The service runs in a child process, so that the crash fails this test
// instead of the test binary.
func TestBackoffIsNotCalledAfterTheLastAttemptAndCannotCrashTheConsumer(t *testing.T) {
	if os.Getenv("INLET_REVIEW_BACKOFF_CHILD") == "1" {
		b := setup(t)
		// One retry: its delay. No retry follows attempt 2.
		schedule := []time.Duration{0}
		b.start(t, b.config(consumers.Handler{Name: "tablebackoff", MaxAttempts: 2,
			Backoff: func(n int) time.Duration { return schedule[n-1] },
			Func: func(context.Context, *consumers.Event) error {
				return errors.New("downstream refused")
			}}))
		b.StartStreamer(t, consumertest.StreamerOptions{})
		jobID := b.JobID(t, b.InsertEvent(t, consumertest.EventParams{}), "tablebackoff")
		b.WaitJobStatus(t, jobID, "dead_letter", wait)
		if got := b.Outcomes(t, jobID); !slices.Equal(got, []string{"failed", "dead_letter"}) {
			t.Fatalf("attempts %v, want [failed dead_letter]", got)
		}
		return
	}
	t.Parallel()
	if why, err := runChild(t, "TestBackoffIsNotCalledAfterTheLastAttemptAndCannotCrashTheConsumer", "INLET_REVIEW_BACKOFF_CHILD"); err != nil {
		t.Fatalf("the consumer process failed (%v) when a job's last attempt failed under a Backoff defined for its retries only:\n%s", err, why)
	}
}

// Defect: DefaultBackoff is documented as "jittered by ±20% so jobs that
// failed together do not retry together, and capped at 24h", but the jitter
// is applied before the cap (backoff.go:22-23: d is already the 24h cap for
// attempt >= 13, then min(d·[0.8,1.2), 24h)). Every draw with jitter >= 1 —
// half of them — is exactly 24h: from attempt 13 on (the default
// MaxAttempts is 25, so attempts 13..24 are all like this) half of the jobs
// that failed together (a downstream outage) retry in the same instant,
// exactly the thundering herd the jitter is there to prevent. (The existing
// TestDefaultBackoff only counts distinct values, which the other half
// supplies.)
//
// Expected: at the cap the delays stay spread, e.g. over [19.2h, 24h], with
// no single value taken by more than a few draws.
func TestDefaultBackoffStaysJitteredAtItsCap(t *testing.T) {
	t.Parallel()
	for _, attempt := range []int{13, 20, 24} {
		const draws = 1000
		counts := map[time.Duration]int{}
		for range draws {
			counts[consumers.DefaultBackoff(attempt)]++
		}
		most, at := 0, time.Duration(0)
		for d, n := range counts {
			if n > most {
				most, at = n, d
			}
		}
		if most > draws/20 {
			t.Errorf("DefaultBackoff(%d): %d of %d draws are exactly %s: jobs that failed together retry together", attempt, most, draws, at)
		}
	}
}
