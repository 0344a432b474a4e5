package consumers

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// ErrorClass is the coarse kind of a failed attempt. Classes are the only
// error information that may leave Postgres (logs, metrics, reports); the
// error text itself stays in jobs.last_error and job_attempts.error.
type ErrorClass string

// The fixed list of error classes. [Classes] returns it.
const (
	ClassHandlerError ErrorClass = "handler_error" // the handler returned an unclassified error
	ClassTimeout      ErrorClass = "timeout"       // the attempt or a call inside it ran out of time
	ClassPanic        ErrorClass = "panic"         // the handler panicked
	ClassPermanent    ErrorClass = "permanent"     // the handler said retrying cannot help
	ClassHTTP4xx      ErrorClass = "http_4xx"      // a downstream HTTP service answered 4xx
	ClassHTTP5xx      ErrorClass = "http_5xx"      // a downstream HTTP service answered 5xx
	ClassNetwork      ErrorClass = "network"       // a downstream service could not be reached
	ClassEventMissing ErrorClass = "event_missing" // the job's event is gone
	ClassLeaseExpired ErrorClass = "lease_expired" // no outcome before the lease ran out (set by the streamer's reaper)
)

var classes = []ErrorClass{
	ClassHandlerError, ClassTimeout, ClassPanic, ClassPermanent,
	ClassHTTP4xx, ClassHTTP5xx, ClassNetwork, ClassEventMissing, ClassLeaseExpired, ClassTransaction,
}

// Classes returns every error class, a fresh slice each call.
func Classes() []ErrorClass { return slices.Clone(classes) }

func (c ErrorClass) valid() bool { return slices.Contains(classes, c) }

// classer is implemented by the errors that carry a class; the outermost one
// in an error's chain decides the class.
type classer interface {
	error
	errorClass() ErrorClass
}

type classError struct {
	err   error
	class ErrorClass
}

func (e *classError) Error() string          { return e.err.Error() }
func (e *classError) Unwrap() error          { return e.err }
func (e *classError) errorClass() ErrorClass { return e.class }

type permanentError struct{ err error }

func (e *permanentError) Error() string          { return e.err.Error() }
func (e *permanentError) Unwrap() error          { return e.err }
func (e *permanentError) errorClass() ErrorClass { return ClassPermanent }

// WithClass attaches class to err; the job's attempt is recorded with it. A
// class not in [Classes] becomes [ClassHandlerError]. WithClass(err,
// [ClassPermanent]) is [Permanent](err): the job goes to dead_letter after
// this attempt, as the class says (review helper-221: it was retried to
// max_attempts, every attempt recorded as permanent). WithClass(nil, c) is
// nil.
func WithClass(err error, class ErrorClass) error {
	if err == nil {
		return nil
	}
	if class == ClassPermanent {
		return Permanent(err)
	}
	if !class.valid() {
		class = ClassHandlerError
	}
	return &classError{err: err, class: class}
}

// Permanent marks err as one retrying cannot fix: the job goes to dead_letter
// after this attempt, with class [ClassPermanent] (unless an outer
// [WithClass] names another). Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err: err}
}

// IsPermanent reports whether err, or any error it wraps, was made by
// [Permanent] or by [WithClass] with [ClassPermanent]. A permanent error
// wrapped in an outer [WithClass] of another class is still permanent: the
// class recorded is the outer one.
func IsPermanent(err error) bool {
	var p *permanentError
	return errors.As(err, &p)
}

// ClassOf returns the class an attempt failing with err is recorded with: the
// outermost class attached by [WithClass] or [Permanent]; otherwise
// [ClassTimeout] for a context deadline and [ClassHandlerError] for anything
// else. ClassOf(nil) is "".
func ClassOf(err error) ErrorClass {
	if err == nil {
		return ""
	}
	var c classer
	if errors.As(err, &c) {
		return c.errorClass()
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return ClassTimeout
	}
	return ClassHandlerError
}

// verdict is what the SDK reads of a failed attempt's error: the class it is
// recorded with, whether it is [Permanent], the delay its [RetryAfter] asks
// for, and whether PostgreSQL raised it to resolve a conflict (40001, 40P01:
// a transactional handler's run may go again).
type verdict struct {
	class      ErrorClass
	permanent  bool
	retryAfter time.Duration
	conflict   bool
}

// failure is an attempt's error with its verdict, read once (judge) and used
// everywhere after: a nil err is a success.
type failure struct {
	err error
	verdict
}

// judge reads err's verdict, once, under a recover. A handler's error type
// is the handler's code, and walking its chain (errors.As and errors.Is call
// its Unwrap, As and Is methods) runs it outside the handler's recover: a
// typed nil wrapped once, fmt.Errorf("charge: %w", err) with err a nil
// *MyError behind the error interface, dereferences its nil receiver in
// Unwrap, and the panic on the attempt's goroutine ended the process, every
// attempt in it lost and later counted lease_expired (review helper-297).
// When walking the chain panics, the attempt fails as an unclassified
// handler error ([ClassHandlerError]): not permanent, no Retry-After, no
// conflict. judge(nil) is the zero verdict.
func judge(err error) (f failure) {
	f.err = err
	if err == nil {
		return f
	}
	defer func() {
		if p := recover(); p != nil {
			f.verdict = verdict{class: ClassHandlerError}
		}
	}()
	f.verdict = verdict{class: ClassOf(err), permanent: IsPermanent(err), retryAfter: RetryAfterOf(err), conflict: conflict(err)}
	return f
}

// conflict reports an error PostgreSQL raised to resolve a conflict
// (serialization failure, deadlock), which a new transaction may not meet.
func conflict(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "40001" || pgErr.Code == "40P01")
}
