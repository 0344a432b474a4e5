package consumers

import (
	"errors"
	"time"
)

type retryAfterError struct {
	err   error
	after time.Duration
}

func (e *retryAfterError) Error() string { return e.err.Error() }
func (e *retryAfterError) Unwrap() error { return e.err }

// RetryAfter asks that the retry following this failed attempt come no
// sooner than d from now: a downstream service's Retry-After, a provider
// API's rate-limit reset. The retry is scheduled after the larger of d and
// the handler's Backoff, d counting for at most 24h (DefaultBackoff's cap),
// so a service answering "come back in a year" does not park the job. It
// changes neither the class the attempt is recorded with nor whether a
// retry follows: a [Permanent] error and a job's last attempt still
// dead-letter. RetryAfter(nil, d) is nil; d ≤ 0 adds nothing.
func RetryAfter(err error, d time.Duration) error {
	if err == nil || d <= 0 {
		return err
	}
	return &retryAfterError{err: err, after: d}
}

// RetryAfterOf returns the delay the outermost [RetryAfter] in err's chain
// asked for, at most 24h; 0 when none did.
func RetryAfterOf(err error) time.Duration {
	var r *retryAfterError
	if !errors.As(err, &r) {
		return 0
	}
	return min(r.after, backoffCap)
}
