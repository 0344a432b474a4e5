package consumers

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"testing"
	"time"
)

// TestJudgeOfAChainThatPanics: walking a handler's error chain is the
// handler's code; judge reads it once under a recover (review helper-297).
func TestJudgeOfAChainThatPanics(t *testing.T) {
	t.Parallel()
	wrapped := fmt.Errorf("charge: %w", r297Charge())
	for _, tc := range []struct {
		name string
		err  error
		want verdict
	}{
		{"nil", nil, verdict{}},
		{"plain", errors.New("boom"), verdict{class: ClassHandlerError}},
		{"wrapped typed nil", wrapped, verdict{class: ClassHandlerError}},
		{"typed nil under Permanent and RetryAfter", RetryAfter(Permanent(wrapped), time.Minute), verdict{class: ClassHandlerError}},
		{"permanent with Retry-After", RetryAfter(Permanent(errors.New("gone")), time.Minute), verdict{class: ClassPermanent, permanent: true, retryAfter: time.Minute}},
		{"deadline", fmt.Errorf("call: %w", context.DeadlineExceeded), verdict{class: ClassTimeout}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := judge(tc.err)
			if f.verdict != tc.want || f.err != tc.err {
				t.Errorf("judge(%s) = %+v (err %v); want %+v and the error kept", tc.name, f.verdict, f.err, tc.want)
			}
		})
	}
	c := &conflicts{errs: []error{errors.New("40001")}}
	if c.returned(wrapped) {
		t.Error("conflicts.returned(a wrapped typed nil) = true")
	}
}

// TestRetryWhileUnavailableLastsTheLease: an outcome is tried again while
// Postgres is unavailable until the lease runs out, with a capped backoff,
// and not at all for an error the server gave (review helper-297).
func TestRetryWhileUnavailableLastsTheLease(t *testing.T) {
	t.Parallel()
	t.Run("unavailable until the lease ends", func(t *testing.T) {
		t.Parallel()
		var tries atomic.Int32
		began := time.Now()
		until := began.Add(1200 * time.Millisecond)
		err := retryWhileUnavailable(context.Background(), until, func(context.Context) error {
			tries.Add(1)
			return fmt.Errorf("complete 1 jobs: %w", io.ErrUnexpectedEOF)
		})
		took := time.Since(began)
		if !errors.Is(err, io.ErrUnexpectedEOF) || tries.Load() < 4 || took < time.Second || took > 3*time.Second {
			t.Errorf("retryWhileUnavailable = %v after %d tries in %s; want the error after 4 tries or more, about the lease's 1.2 s", err, tries.Load(), took)
		}
	})
	t.Run("back before the lease ends", func(t *testing.T) {
		t.Parallel()
		var tries atomic.Int32
		err := retryWhileUnavailable(context.Background(), time.Now().Add(time.Minute), func(context.Context) error {
			if tries.Add(1) < 6 {
				return context.DeadlineExceeded
			}
			return nil
		})
		if err != nil || tries.Load() != 6 {
			t.Errorf("retryWhileUnavailable = %v after %d tries; want nil after 6", err, tries.Load())
		}
	})
	t.Run("not unavailable", func(t *testing.T) {
		t.Parallel()
		var tries atomic.Int32
		err := retryWhileUnavailable(context.Background(), time.Now().Add(time.Minute), func(context.Context) error {
			tries.Add(1)
			return errors.New("permission denied")
		})
		if err == nil || tries.Load() != 1 {
			t.Errorf("retryWhileUnavailable = %v after %d tries; want the error after 1", err, tries.Load())
		}
	})
	t.Run("lease unknown", func(t *testing.T) {
		t.Parallel()
		var tries atomic.Int32
		_ = retryWhileUnavailable(context.Background(), (*leaseEnd)(nil).until(), func(context.Context) error {
			tries.Add(1)
			return context.DeadlineExceeded
		})
		if tries.Load() != 1 {
			t.Errorf("retryWhileUnavailable with no lease end tried %d times; want 1", tries.Load())
		}
	})
}

// TestLeaseEndMovesOutOnly: an extension is greatest(lease_expires_at,
// now()+d), so the lease's end never moves in.
func TestLeaseEndMovesOutOnly(t *testing.T) {
	t.Parallel()
	now := time.Now()
	e := newLeaseEnd(now.Add(time.Minute))
	e.push(now.Add(time.Second))
	if got := e.until(); !got.Equal(now.Add(time.Minute)) {
		t.Errorf("after a shorter extension the lease ends at %v; want %v", got, now.Add(time.Minute))
	}
	e.push(now.Add(time.Hour))
	if got := e.until(); !got.Equal(now.Add(time.Hour)) {
		t.Errorf("after a longer extension the lease ends at %v; want %v", got, now.Add(time.Hour))
	}
}
