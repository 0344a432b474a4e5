package consumers

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"reflect"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/inlet-dev/inlet/consumers/bus"
	"github.com/inlet-dev/inlet/internal/database"
	"github.com/inlet-dev/inlet/schema"
	"github.com/inlet-dev/inlet/schema/queries"
)

const (
	// maxErrorText bounds the error text stored per attempt.
	maxErrorText = 2000
	// recordTimeout bounds one try at writing an outcome (a connection that
	// hangs is then given up for a new one), and writing an outcome whose
	// lease runs out sooner. While Postgres is unavailable an outcome is
	// tried again until its lease runs out (retryWhileUnavailable).
	recordTimeout = 15 * time.Second
	// outcomeRetryFirst is the wait before an outcome's first retry while
	// Postgres is unavailable; it doubles up to outcomeRetryMax.
	outcomeRetryFirst = 250 * time.Millisecond
	outcomeRetryMax   = 2 * time.Second
	// giveBackTimeout bounds giving back the lease of an attempt cut short
	// by Stop's deadline, and how long Stop then waits, in all, for such
	// attempts and for the service's own writes in flight.
	giveBackTimeout = 5 * time.Second
)

// attempt runs one job reference end to end: fetch, run with lease extension,
// record. It never returns an error: whatever it cannot record is left to
// lease expiry. Its span joins the trace of traceParent (the streamer's,
// carried by the message) and is the parent of the handler's spans.
// handlerDone is called once the handler has returned (or was never called):
// the handler's concurrency slot is free while the outcome waits for its
// batch to be written. handlerDeadline is its slot's record of when the
// handler's Timeout ends (unix ns), set once the handler is called: the
// wait for a transactional handler's connection is not its time, and
// extendLease and a reference waiting for a slot (runner.slotsHung) tell a
// handler that ignores its context by it. A rate-limited handler's attempt
// takes its start token last, right before the handler is called
// (takeToken, takeTxSlot): one whose token comes later than its lease
// allows is given back uncounted (giveBackPaced), as it is at Stop's
// deadline (giveBack).
func (s *Service) attempt(r *runner, ref bus.Ref, traceParent string, rd *messageRead, idx int, handlerDeadline *atomic.Int64, handlerDone func()) {
	h := r.h
	ctx, span := s.tracer.Start(withTraceParent(s.workCtx, traceParent), "inlet.consumer.attempt",
		trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(
			attribute.Int64("inlet.job_id", ref.JobID), attribute.Int64("inlet.event_id", ref.EventID),
			attribute.String("inlet.handler", ref.Handler), attribute.String("inlet.source", ref.Provider),
			attribute.String("inlet.event_type", ref.EventType), attribute.Int("inlet.attempt", ref.Attempt)))
	defer span.End()
	attrs := []slog.Attr{
		slog.Int64("job_id", ref.JobID),
		slog.Int64("event_id", ref.EventID),
		slog.String("handler", ref.Handler),
		slog.String("provider", ref.Provider),
		slog.String("event_type", ref.EventType),
		slog.Int("attempt", ref.Attempt),
	}

	ev, l, err := s.take(ctx, ref, rd, idx)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		// Stale (a newer attempt exists), already taken by another consumer
		// (the bus delivered the reference twice), misrouted, or finished.
		s.logger.LogAttrs(ctx, slog.LevelDebug, "skipped job reference: not this attempt's to take", attrs...)
		span.SetAttributes(attribute.String("inlet.outcome", "skipped"))
		return
	case err != nil:
		if errors.Is(context.Cause(ctx), errShutdown) {
			// Stop's deadline cut the read short: the handler never ran,
			// so the attempt must not count (a job on its last attempt
			// would be dead-lettered by the reaper). Fenced on the lease
			// token, as for a reference that never started.
			s.giveBackUnstarted(ref.Handler, []bus.Ref{ref})
			return
		}
		if ctx.Err() == nil {
			s.logger.LogAttrs(ctx, slog.LevelWarn, "take job failed; the lease will expire",
				append(attrs, slog.String("error", err.Error()))...)
		}
		return
	case ev == nil:
		// Taken, but its event is gone: no attempt can succeed.
		f := failure{err: Permanent(WithClass(fmt.Errorf("event %d of job %d does not exist", ref.EventID, ref.JobID), ClassEventMissing)),
			verdict: verdict{class: ClassEventMissing, permanent: true}}
		traceOutcome(span, s.finish(h, ref, l, f, attrs), ClassEventMissing)
		return
	}

	extendCtx, cancelExtending := context.WithCancel(ctx)
	extendDone := make(chan struct{})
	go func() {
		defer close(extendDone)
		s.extendLease(extendCtx, ref, l, handlerDeadline, attrs)
	}()
	stopExtending := func() {
		cancelExtending()
		<-extendDone
	}
	// A handler that ends its goroutine with runtime.Goexit (t.FailNow, a
	// library that calls it) returns neither a value nor a panic, and
	// nothing below the call runs: without this the lease would be
	// extended until the service stops and no outcome ever recorded. The
	// deferred calls still run, so the attempt is recorded as failed here.
	returned := false
	defer func() {
		if returned {
			return
		}
		stopExtending()
		handlerDone()
		f := failure{err: WithClass(errors.New("the handler's goroutine exited without returning (runtime.Goexit)"), ClassPanic),
			verdict: verdict{class: ClassPanic}}
		traceOutcome(span, s.finish(h, ref, l, f, attrs), ClassPanic)
	}()
	// The handler's error with its verdict, read once under a recover
	// (judge): its chain is the handler's code.
	var f failure
	var timedOut bool
	if h.TxFunc != nil {
		var outcome string
		var recorded bool
		var why notRun
		timedOut, outcome, recorded, why, f = s.runTx(ctx, r, ref, l, ev, stopExtending, handlerDeadline)
		returned = true
		handlerDone()
		switch {
		case recorded:
			traceOutcome(span, s.report(h, l, outcome, nil, "", attrs), "")
			return
		case why != ran && ctx.Err() != nil:
			s.giveBack(ref, l, attrs) // Stop's deadline came first
			return
		case why == notRunPaced:
			s.giveBackPaced(h, ref, l, attrs)
			return
		case why != ran:
			traceOutcome(span, s.giveBackStarved(h, ref, l, attrs), ClassTransaction)
			return
		}
	} else {
		// The start token last: the read and the liveness write above may
		// wait on the database (review helper-338).
		if w := s.takeToken(ctx, r); w != tokenTaken {
			returned = true
			stopExtending() // before the lease is given back: an extension then would find it lost
			handlerDone()
			if w == tokenLate && ctx.Err() == nil {
				s.giveBackPaced(h, ref, l, attrs)
			} else {
				s.giveBack(ref, l, attrs) // Stop's deadline came first
			}
			return
		}
		handlerDeadline.Store(deadlineNanos(time.Now().Add(h.Timeout)))
		f, timedOut = s.run(ctx, h, ev)
		returned = true
		stopExtending()
		handlerDone()
	}

	if f.err != nil && errors.Is(context.Cause(ctx), errShutdown) {
		// Not the handler's fault: no failure is recorded, and the lease is
		// given back so that the attempt does not count either. Left to
		// expire, it would be counted by the reaper (this consumer extended
		// it), and dead-letter a job on its last attempt.
		s.giveBack(ref, l, attrs)
		return
	}

	if f.class == ClassHandlerError && timedOut {
		f.class = ClassTimeout
	}
	traceOutcome(span, s.finish(h, ref, l, f, attrs), f.class)
}

// traceOutcome marks an attempt's span with its outcome and error class
// (never the error's text).
func traceOutcome(span trace.Span, outcome string, class ErrorClass) {
	span.SetAttributes(attribute.String("inlet.outcome", outcome))
	if class != "" {
		span.SetAttributes(attribute.String("inlet.error_class", string(class)))
		span.SetStatus(codes.Error, string(class))
	}
}

// finish records the outcome and logs it (metadata and error class only),
// and returns it as counted: completed, failed, dead_letter, lost or
// record_error.
func (s *Service) finish(h Handler, ref bus.Ref, l lease, f failure, attrs []slog.Attr) string {
	outcome, err := s.record(h, ref, l, f)
	return s.report(h, l, outcome, err, f.class, attrs)
}

// report counts and logs an attempt's outcome as recorded (err: recording
// it failed; outcome "": its lease was lost), and returns it as counted.
func (s *Service) report(h Handler, l lease, outcome string, err error, class ErrorClass, attrs []slog.Attr) string {
	ctx := s.workCtx
	took := time.Since(l.read) // this process's monotonic clock: never the skew between hosts
	counted := outcome
	switch {
	case err != nil:
		counted = "record_error"
	case outcome == "":
		counted = "lost"
	}
	s.cfg.Metrics.AttemptFinished(h.Name, counted, class, took)
	attrs = append(attrs, slog.Duration("duration", took))
	if class != "" {
		attrs = append(attrs, slog.String("error_class", string(class)))
	}
	switch {
	case err != nil:
		s.logger.LogAttrs(ctx, slog.LevelError, "record attempt outcome failed; the lease will expire",
			append(attrs, slog.String("error", err.Error()))...)
	case outcome == "":
		s.logger.LogAttrs(ctx, slog.LevelWarn, "attempt outcome not recorded: the job's lease was lost", attrs...)
	default:
		level := slog.LevelInfo
		if outcome == "dead_letter" {
			level = slog.LevelWarn
		}
		s.logger.LogAttrs(ctx, level, "attempt finished", append(attrs, slog.String("outcome", outcome))...)
	}
	return counted
}

// lease is what a consumer holds of an attempt it read.
type lease struct {
	// started is when this consumer read it, on the database's clock (so
	// job_attempts durations use one clock).
	started time.Time
	// read is the same moment on this process's monotonic clock, for
	// durations: a wall clock off from the database's would skew them.
	read time.Time
	// leasedAt is when the streamer leased it (jobs.attempted_at): with the
	// attempt number, the lease token every later statement is fenced on,
	// since attempt numbers repeat after a replay.
	leasedAt time.Time
	// expires is when the lease runs out unless extended.
	expires time.Time
	// maxAttempts is the job's max_attempts, as read with the event.
	maxAttempts int
	// partition is the job's event_received_at, its partition key.
	partition time.Time
	// end is when the lease runs out as this process knows it, shared by
	// the copies of the lease: an outcome the database cannot take yet is
	// tried again until then.
	end *leaseEnd
}

// leaseEnd is when an attempt's lease runs out, on this process's
// monotonic clock: the time left when it was read, or the length of an
// extension, counted from before its statement was sent, so never later
// than the database's lease_expires_at (the hosts' clocks may disagree;
// their pace does not).
type leaseEnd struct{ at atomic.Pointer[time.Time] }

// newLeaseEnd is a lease end at t.
func newLeaseEnd(t time.Time) *leaseEnd {
	e := &leaseEnd{}
	e.at.Store(&t)
	return e
}

// until is the lease's end; the zero time when it is not known.
func (e *leaseEnd) until() time.Time {
	if e == nil {
		return time.Time{}
	}
	if t := e.at.Load(); t != nil {
		return *t
	}
	return time.Time{}
}

// push moves the lease's end out to t, never in: an extension is
// greatest(lease_expires_at, now() + d).
func (e *leaseEnd) push(t time.Time) {
	if e == nil {
		return
	}
	for {
		old := e.at.Load()
		if old != nil && !t.After(*old) {
			return
		}
		if e.at.CompareAndSwap(old, &t) {
			return
		}
	}
}

// take reads this attempt's event, writing nothing: batched with the other
// references of its message starting with it when batching is on (rd), else
// in a statement of its own.
// It returns a nil event when the job's event no longer exists, and an error
// wrapping pgx.ErrNoRows when the reference's lease is not current (stale,
// finished or misrouted). A lease that would run out before its first
// extension (the reference waited in the bus) is extended first; any other
// that began after this service's last liveness write is covered by one
// more (sayAliveSince) before its handler runs.
func (s *Service) take(ctx context.Context, ref bus.Ref, rd *messageRead, idx int) (*Event, lease, error) {
	var t taken
	var err error
	if s.takes != nil && rd != nil {
		t, err = rd.get(ctx, idx)
		if err != nil {
			// Nothing was written: read this attempt alone.
			s.logger.LogAttrs(ctx, slog.LevelDebug, "batched read failed; reading the attempt alone",
				slog.Int64("job_id", ref.JobID), slog.String("error", err.Error()))
		}
	}
	if s.takes == nil || rd == nil || err != nil {
		var got map[int64]taken
		got, err = s.fetch(ctx, []bus.Ref{ref})
		t = got[ref.JobID]
	}
	if err != nil {
		return nil, lease{}, fmt.Errorf("read attempt %d of job %d: %w", ref.Attempt, ref.JobID, err)
	}
	if !t.found {
		return nil, lease{}, fmt.Errorf("read attempt %d of job %d: %w", ref.Attempt, ref.JobID, pgx.ErrNoRows)
	}
	remaining := t.l.expires.Sub(t.l.started)
	if remaining >= s.cfg.LeaseExtend/2 {
		// A lease not extended counts, should this process die in the
		// handler, only if a consumer was seen after it began
		// (sayAliveSince). Its wait is bounded by half of what is left of
		// the lease, and the lease is extended below if the wait left
		// less than the first extension needs: the SDK's own bookkeeping
		// never lets a lease lapse under a running handler (review
		// helper-215).
		began := time.Now()
		wctx, cancel := context.WithTimeout(ctx, remaining/2)
		err := s.sayAliveSince(wctx, ref.Handler, t.l.leasedAt)
		cancel()
		remaining -= time.Since(began)
		switch {
		case errors.Is(err, errBusDown):
			// The bus says it is not delivering to this consumer, or to
			// this handler (this reference came through all the same:
			// buffered before a cut, or on the handler's other topic,
			// which consumes), and saying alive would have streamers
			// lease what cannot reach it. The lease is extended below
			// instead: it then names this consumer and counts should it
			// die in the handler (review helper-243, helper-251).
			remaining = 0
		case err != nil && ctx.Err() == nil:
			// The handler runs all the same: should this process die in
			// it, the attempt may be given back uncounted, as before.
			level := slog.LevelWarn
			if errors.Is(err, errAliveRecentlyFailed) {
				level = slog.LevelDebug // the failed write was logged once
			}
			s.logger.LogAttrs(ctx, level, "record consumer liveness before running the handler failed; if this process dies in it, the attempt may not count",
				slog.Int64("job_id", ref.JobID), slog.String("handler", ref.Handler), slog.String("error", err.Error()))
		}
	}
	if remaining < s.cfg.LeaseExtend/2 {
		// Extended, the lease names this consumer (worker_id) and counts
		// if it expires.
		expires, err := s.extend(ctx, ref, t.l)
		if err != nil {
			return nil, lease{}, fmt.Errorf("extend lease of attempt %d of job %d before it starts: %w", ref.Attempt, ref.JobID, err)
		}
		t.l.expires = expires
	}
	return t.ev, t.l, nil
}

// taken is one attempt read: found when its lease is current, with its
// event (nil when the event no longer exists) and lease.
type taken struct {
	found bool
	ev    *Event
	l     lease
}

var fetchJobsSQL = schema.Query("FetchJobs")

// fetch reads the attempts of refs in one read-only statement (FetchJobs),
// by job id; a reference whose lease is not current is missing. refs name
// each job once (readRefs): the rows say which job, not which reference.
func (s *Service) fetch(ctx context.Context, refs []bus.Ref) (map[int64]taken, error) {
	n := len(refs)
	ids, attempts, handlers, events := make([]int64, n), make([]int32, n), make([]string, n), make([]int64, n)
	partitions, leased := make([]time.Time, n), make([]*time.Time, n)
	byID := make(map[int64]bus.Ref, n)
	for i, r := range refs {
		ids[i], attempts[i], handlers[i], events[i], partitions[i] = r.JobID, int32(r.Attempt), r.Handler, r.EventID, r.EventReceivedAt //nolint:gosec // G115: Ref.Attempt is jobs.attempt, an int4 the streamer read
		if !r.LeasedAt.IsZero() {
			leased[i] = &r.LeasedAt
		}
		byID[r.JobID] = r
	}
	s.readStatements.Add(1)
	sent := time.Now() // the read's now() is no earlier: what is left of a lease counts from here
	rows, err := s.cfg.Pool.Query(ctx, fetchJobsSQL, ids, attempts, handlers, events, partitions, leased)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	got := make(map[int64]taken, n)
	read := time.Now()
	for rows.Next() {
		var (
			id, maxAttempts int64
			l               lease
			eventID         *int64
			headers         map[string][]string
			ev              Event
			occurred        *time.Time
		)
		if err := rows.Scan(&id, &l.leasedAt, &l.expires, &maxAttempts, &l.started, &eventID,
			&ev.Provider, &ev.Scheme, &ev.ExternalID, &ev.EventType, &ev.ReceivedAt, &headers, &ev.Body, &occurred); err != nil {
			return nil, err
		}
		if occurred != nil {
			ev.OccurredAt = *occurred
		}
		ref := byID[id]
		l.partition, l.read, l.maxAttempts = ref.EventReceivedAt, read, int(maxAttempts)
		l.end = newLeaseEnd(sent.Add(l.expires.Sub(l.started)))
		t := taken{found: true, l: l}
		if eventID != nil {
			ev.JobID, ev.Handler, ev.Attempt, ev.MaxAttempts, ev.EventID = ref.JobID, ref.Handler, ref.Attempt, int(maxAttempts), *eventID
			ev.Headers = http.Header(headers)
			if ev.Headers == nil {
				ev.Headers = http.Header{}
			}
			if ev.Body == nil {
				ev.Body = []byte{}
			}
			t.ev = &ev
		}
		got[id] = t
	}
	s.reads.Add(int64(len(got)))
	return got, rows.Err()
}

var extendLeaseSQL = schema.Query("ExtendLease")

// extend pushes the attempt's lease out to now()+LeaseExtend and records
// this consumer as its holder; it fails with pgx.ErrNoRows when the lease
// was lost.
func (s *Service) extend(ctx context.Context, ref bus.Ref, l lease) (time.Time, error) {
	return s.extendFor(ctx, ref, l, s.cfg.LeaseExtend)
}

// extendFor is extend to now()+d; the lease's end (l.end) moves with it.
func (s *Service) extendFor(ctx context.Context, ref bus.Ref, l lease, d time.Duration) (time.Time, error) {
	var expires time.Time
	sent := time.Now()
	err := s.cfg.Pool.QueryRow(ctx, extendLeaseSQL, ref.JobID, ref.Attempt, d, l.leasedAt, s.cfg.WorkerID).Scan(&expires)
	if err == nil {
		l.end.push(sent.Add(d))
	}
	return expires, err
}

// giveBack gives back the lease of an attempt cut short by Stop's deadline
// (GiveBackAttempt): its job is pending again at once, the attempt not
// counted. On a context of its own, the work context being cancelled. When
// it fails, the lease expires and the reaper counts the attempt.
func (s *Service) giveBack(ref bus.Ref, l lease, attrs []slog.Attr) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(s.workCtx), giveBackTimeout)
	defer cancel()
	given, err := s.giveBackLease(ctx, ref, l.partition, l.leasedAt)
	switch {
	case err != nil:
		s.logger.LogAttrs(ctx, slog.LevelWarn, "attempt cut short by shutdown; giving its lease back failed, so the reaper will count the attempt when the lease expires",
			append(attrs, slog.String("error", err.Error()))...)
	case !given:
		s.logger.LogAttrs(ctx, slog.LevelWarn, "attempt cut short by shutdown; its lease was not given back: it was no longer this attempt's", attrs...)
	default:
		s.logger.LogAttrs(ctx, slog.LevelInfo, "attempt cut short by shutdown; its lease was given back and the attempt does not count", attrs...)
	}
}

// giveBackStarved gives back the lease of a transactional attempt that got
// no transaction slot within txWait (runTx): its handler never ran, so the
// attempt must not count, whoever held the slots (a handler ignoring its
// context may be another one: review helper-137). The job is due again at
// once (GiveBackAttempt keeps its due time), and whichever consumer of the
// handler leases it next runs it, or waits for a slot as long again: a
// starved handler's job comes round once per txWait, never spinning, and
// never dead-lettered for it. Logged (warn, class transaction) and counted
// (outcome given_back) so that an operator sees the starved handler. It
// returns the outcome counted: given_back, or as report would (lost: the
// lease was no longer this attempt's; record_error: giving it back failed,
// and the reaper counts the attempt when the lease expires).
func (s *Service) giveBackStarved(h Handler, ref bus.Ref, l lease, attrs []slog.Attr) string {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(s.workCtx), giveBackTimeout)
	defer cancel()
	given, err := s.giveBackLease(ctx, ref, l.partition, l.leasedAt)
	attrs = append(attrs, slog.String("error_class", string(ClassTransaction)), slog.Duration("waited", s.txWait))
	const why = "no transaction slot for the handler within the bound: the transactions ahead hold theirs longer than their Timeouts and commits allow (a transactional handler that ignores its context, or a commit that does not end); the handler did not run"
	counted := "given_back"
	switch {
	case err != nil:
		counted = "record_error"
		s.logger.LogAttrs(ctx, slog.LevelError, why+"; giving its lease back failed, so the reaper will count the attempt when the lease expires",
			append(attrs, slog.String("error", err.Error()))...)
	case !given:
		counted = "lost"
		s.logger.LogAttrs(ctx, slog.LevelWarn, why+"; its lease was no longer this attempt's", attrs...)
	default:
		s.logger.LogAttrs(ctx, slog.LevelWarn, why+"; its lease was given back and the attempt does not count", attrs...)
	}
	s.cfg.Metrics.AttemptFinished(h.Name, counted, ClassTransaction, time.Since(l.read))
	return counted
}

// giveBackLease gives back ref's lease, taken at leasedAt, of the job in
// partition (GiveBackAttempt, fenced on that token), and reports whether it
// was still this attempt's.
func (s *Service) giveBackLease(ctx context.Context, ref bus.Ref, partition, leasedAt time.Time) (bool, error) {
	return queries.New(s.cfg.Pool).GiveBackAttempt(ctx, queries.GiveBackAttemptParams{
		JobID: ref.JobID, EventReceivedAt: partition, Attempt: int32(ref.Attempt), LeasedAt: leasedAt}) //nolint:gosec // G115: Ref.Attempt is jobs.attempt_count, an int4 the streamer read
}

// giveBackUnstarted gives back the leases of references that Stop's
// deadline left unstarted (the rest of a message whose first references
// ran), as giveBack does for an attempt cut short: left to expire, the
// reaper would count each one whenever another consumer of the handler was
// alive, though no handler ran.
func (s *Service) giveBackUnstarted(handler string, refs []bus.Ref) {
	s.giveBackRefs(handler, refs, slog.LevelInfo, "consumers stopped before these job references started; their leases were given back (those not given back expire, and the reaper counts them)")
}

// giveBackHung gives back the leases of references that waited for one of
// r's slots r.waitBound and found every slot held by an attempt whose
// handler ignores its context (waitForSlot): uncounted, and no failure of
// the handler's circuit breaker (GiveBackAttempt), each job is due again
// at once for another consumer of the handler, or for its circuit's probe,
// which is leased only while none of the handler's jobs is (073). Warned:
// the process holds hung handlers until it is restarted.
func (s *Service) giveBackHung(r *runner, refs []bus.Ref) {
	s.giveBackRefs(r.h.Name, refs, slog.LevelWarn, "job references waited for a slot past the bound, every slot held by an attempt whose handler has not returned a LeaseExtend past its Timeout (it ignores its context); "+
		"their leases were given back and the attempts do not count, for another consumer of the handler to run (those not given back expire, and the reaper counts them); restart this process to free the slots",
		slog.Duration("wait_bound", r.waitBound), slog.Int("slots", cap(r.slots)))
}

// giveBackPaced gives back the lease of an attempt of a rate-limited
// handler whose next start token comes later than its lease allows
// (awaitToken): read (its event fetched, which writes nothing; its lease
// perhaps extended, naming this consumer), its handler never called, so
// GiveBackAttempt (fenced on its lease token) makes its job pending again
// at once with the attempt uncounted (attempt_count less one, worker_id
// cleared), no attempt row written and nothing counted toward the
// handler's circuit breaker or metrics: the streamers lease it again at the
// handler's rate. When it fails, the lease expires and the reaper counts
// the attempt.
func (s *Service) giveBackPaced(h Handler, ref bus.Ref, l lease, attrs []slog.Attr) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(s.workCtx), giveBackTimeout)
	defer cancel()
	given, err := s.giveBackLease(ctx, ref, l.partition, l.leasedAt)
	attrs = append(attrs, slog.Float64("rate_limit", h.RateLimit), slog.Int("burst", h.Burst))
	const why = "job would wait for the handler's rate limit longer than its lease allows"
	switch {
	case err != nil:
		s.logger.LogAttrs(ctx, slog.LevelWarn, why+"; giving its lease back failed, so the reaper will count the attempt when the lease expires",
			append(attrs, slog.String("error", err.Error()))...)
	case !given:
		s.logger.LogAttrs(ctx, slog.LevelWarn, why+"; its lease was not given back: it was no longer this attempt's", attrs...)
	default:
		s.logger.LogAttrs(ctx, slog.LevelInfo, why+"; its lease was given back and the attempt does not count, for the streamer to lease it again at the rate", attrs...)
	}
}

// giveBackRefs gives back the leases of refs, references that never
// started, and logs how many at level, or at warn when some were not. One
// deadline for them all, so a database that does not answer holds the
// caller up once, not once per reference.
func (s *Service) giveBackRefs(handler string, refs []bus.Ref, level slog.Level, msg string, extra ...slog.Attr) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(s.workCtx), giveBackTimeout)
	defer cancel()
	given, notGiven := 0, 0
	var lastErr error
	for _, ref := range refs {
		if ref.LeasedAt.IsZero() {
			notGiven++ // a reference without its lease token (a streamer before 010) cannot be fenced
			continue
		}
		ok, err := s.giveBackLease(ctx, ref, ref.EventReceivedAt, ref.LeasedAt)
		switch {
		case err != nil:
			notGiven++
			lastErr = err
		case ok:
			given++
		default:
			notGiven++
		}
	}
	attrs := append([]slog.Attr{slog.String("handler", handler), slog.Int("references", len(refs)), slog.Int64("job_id", refs[0].JobID),
		slog.Int("given_back", given)}, extra...)
	if lastErr != nil {
		attrs = append(attrs, slog.String("error", lastErr.Error()))
	}
	if notGiven > 0 {
		level = max(level, slog.LevelWarn)
	}
	s.logger.LogAttrs(ctx, level, msg, attrs...)
}

// run calls the handler under its timeout, turning a panic into an error,
// and judges its error once it has returned. It reports whether the
// attempt's own deadline passed.
func (s *Service) run(ctx context.Context, h Handler, ev *Event) (f failure, timedOut bool) {
	actx, cancel := context.WithTimeout(ctx, h.Timeout)
	defer cancel()
	f = judge(call(actx, h.Func, ev))
	return f, errors.Is(actx.Err(), context.DeadlineExceeded) && ctx.Err() == nil
}

func call(ctx context.Context, f HandlerFunc, ev *Event) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = newPanicError(p)
		}
	}()
	return notTypedNil(f(ctx, ev))
}

// notTypedNil replaces an error that is a nil pointer (or map, slice, func,
// channel) behind a non-nil interface, the "typed nil" a handler returns
// from `var e *MyError; return e`: != nil, so a failure, but its Error
// method may dereference it and would panic outside the handler's recover.
func notTypedNil(err error) error {
	if err == nil {
		return nil
	}
	switch v := reflect.ValueOf(err); v.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan, reflect.Interface:
		if v.IsNil() {
			return fmt.Errorf("the handler returned a nil %T as its error (a typed nil is not a nil error)", err)
		}
	}
	return err
}

// panicError is a recovered panic; its text (value and stack) stays in Postgres.
type panicError struct {
	value any
	stack []byte
}

func newPanicError(p any) *panicError { return &panicError{value: p, stack: debug.Stack()} }

func (e *panicError) Error() string          { return fmt.Sprintf("panic: %v\n\n%s", e.value, e.stack) }
func (e *panicError) errorClass() ErrorClass { return ClassPanic }

// extendLease pushes the lease out every LeaseExtend/3 until ctx ends or the
// lease is lost. The handler keeps running either way: a lost lease only
// means its outcome will not be recorded.
func (s *Service) extendLease(ctx context.Context, ref bus.Ref, l lease, handlerDeadline *atomic.Int64, attrs []slog.Attr) {
	t := time.NewTicker(s.cfg.LeaseExtend / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		// A handler still running a LeaseExtend past its Timeout (counted
		// from when it started: a transactional handler's wait for a
		// connection is not its time, review helper-131) ignores its
		// context: its lease is left to run out, and the reaper takes the
		// job back (retried, or dead-lettered on its last attempt), as for
		// a consumer that died. Extending it for as long as the handler
		// blocked held the job, and its slot, for good (review helper-130).
		if d := handlerDeadline.Load(); d != 0 && time.Now().After(time.Unix(0, d).Add(s.cfg.LeaseExtend)) {
			s.logger.LogAttrs(ctx, slog.LevelWarn, "the handler has not returned a LeaseExtend past its Timeout (it ignores its context): its lease is no longer extended, and the reaper will take the job back",
				attrs...)
			return
		}
		cctx, cancel := context.WithTimeout(ctx, s.cfg.LeaseExtend)
		_, err := s.extend(cctx, ref, l)
		cancel()
		switch {
		case ctx.Err() != nil:
			return
		case err != nil && !errors.Is(err, pgx.ErrNoRows):
			s.logger.LogAttrs(ctx, slog.LevelWarn, "extend lease failed",
				append(attrs, slog.String("error", err.Error()))...)
		case err != nil:
			s.logger.LogAttrs(ctx, slog.LevelWarn, "lease lost while the handler runs; its outcome will not be recorded", attrs...)
			return
		}
	}
}

// deadlineNanos is t as handlerDeadline keeps it, unix nanoseconds,
// saturated: a time past 2262 has no int64 UnixNano, and a Timeout of "no
// timeout" (math.MaxInt64) wrapped to the 1700s, so extendLease gave the
// lease up at its first tick while the handler ran (review helper-137).
func deadlineNanos(t time.Time) int64 {
	if t.After(maxUnixNano) {
		return math.MaxInt64
	}
	return t.UnixNano()
}

var maxUnixNano = time.Unix(0, math.MaxInt64)

// satAdd is a+b for a b that is not negative, at most math.MaxInt64 (about
// 292 years) instead of wrapping negative.
func satAdd(a, b time.Duration) time.Duration {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// satMul is d*n for a d and n that are not negative, at most math.MaxInt64.
func satMul(d time.Duration, n int64) time.Duration {
	if d != 0 && n > math.MaxInt64/int64(d) {
		return math.MaxInt64
	}
	return d * time.Duration(n)
}

// backoff calls the handler's Backoff, which is the program's code: a panic
// in it (an index past the end of a table of delays) falls back to
// DefaultBackoff instead of ending the process and every attempt in it.
func (s *Service) backoff(h Handler, attempt int) (d time.Duration) {
	defer func() {
		if p := recover(); p != nil {
			s.logger.LogAttrs(context.Background(), slog.LevelError, "handler's Backoff panicked; DefaultBackoff used",
				slog.String("handler", h.Name), slog.Int("attempt", attempt))
			d = DefaultBackoff(attempt)
		}
	}()
	return max(h.Backoff(attempt), 0)
}

// record writes the attempt's outcome on its job and its history row, in one
// transaction; the history row is written only when the job update matched,
// i.e. this attempt still held the lease. It returns the outcome recorded, ""
// when the lease was lost. f is the attempt's error with its verdict (judge):
// the handler's error chain is not walked again here.
func (s *Service) record(h Handler, ref bus.Ref, l lease, f failure) (string, error) {
	ctx, cancel := s.outcomeContext(l)
	defer cancel()

	if f.err == nil {
		return s.complete(ctx, ref, l)
	}
	text := errorText(f.err)
	var retryIn time.Duration
	if !f.permanent && (l.maxAttempts == 0 || ref.Attempt < l.maxAttempts) {
		// Only when a retry follows; never sooner than the handler's error
		// asked (RetryAfter).
		retryIn = max(s.backoff(h, ref.Attempt), f.retryAfter)
	}
	var outcome string
	err := retryWhileUnavailable(ctx, l.end.until(), func(ctx context.Context) error {
		// Before a connection is taken (see breaker.failing), and not
		// held while the next try waits.
		unlock := s.failingLock(ref.Handler)
		defer unlock()
		// The transaction holds the job's row lock from FailJob to its
		// COMMIT, and the reaper skips locked rows: BEGIN bounds, in the
		// same message, how long the session may sit idle in it
		// (boundIdleSQL), so that a consumer frozen before the COMMIT does
		// not hold the job past its lease (review helper-221). Nothing but
		// this function's statements runs in it.
		return pgx.BeginTxFunc(ctx, s.cfg.Pool, recordTxOptions, func(tx pgx.Tx) error {
			outcome = ""
			err := tx.QueryRow(ctx, failJobSQL,
				ref.JobID, ref.Attempt, text, string(f.class), retryIn, f.permanent, l.leasedAt, s.cfg.WorkerID).Scan(&outcome)
			if errors.Is(err, pgx.ErrNoRows) {
				return nil
			}
			if err != nil {
				return err
			}
			if _, err = tx.Exec(ctx, insertAttemptSQL,
				ref.JobID, ref.Attempt, s.cfg.WorkerID, l.started, outcome, string(f.class), text); err != nil {
				return err
			}
			return s.failed(ctx, tx, ref.Handler)
		})
	})
	if err != nil {
		return "", fmt.Errorf("record outcome of attempt %d of job %d: %w", ref.Attempt, ref.JobID, err)
	}
	return outcome, nil
}

// outcomeContext is what writing l's attempt's outcome runs on: not ended
// by Stop (the handler's deadline may have passed, and a forced shutdown
// should not throw away a success), ending when the lease runs out
// (l.end), or recordTimeout from now when that is later.
func (s *Service) outcomeContext(l lease) (context.Context, context.CancelFunc) {
	deadline := time.Now().Add(recordTimeout)
	if end := l.end.until(); end.After(deadline) {
		deadline = end
	}
	return context.WithDeadline(context.WithoutCancel(s.workCtx), deadline)
}

// retryWhileUnavailable runs f, each try on ctx bounded by recordTimeout (a
// connection that hangs is given up, and the next try takes a new one),
// until it succeeds, fails for another reason than Postgres being
// unavailable (outcomeRetryable), ctx ends, or until (when the attempt's
// lease runs out) has passed, waiting outcomeRetryFirst between tries,
// doubled each time up to outcomeRetryMax. Three tries in 1.5 s threw
// away the outcome of every attempt finishing during a database restart
// (a failover, a minor upgrade: a few seconds of refused connections),
// and the reaper then counted each one lease_expired, a success too,
// toward max_attempts and the handler's circuit breaker (review
// helper-297). The outcomes are fenced on the lease token, so a try after
// the lease was taken back writes nothing; none is tried past until.
func retryWhileUnavailable(ctx context.Context, until time.Time, f func(context.Context) error) error {
	wait := outcomeRetryFirst
	for {
		tctx, cancel := context.WithTimeout(ctx, recordTimeout)
		err := f(tctx)
		cancel()
		if err == nil || !outcomeRetryable(err) || ctx.Err() != nil {
			return err
		}
		left := time.Until(until)
		if left <= 0 {
			return err
		}
		t := time.NewTimer(min(wait, left))
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		wait = min(2*wait, outcomeRetryMax)
	}
}

// outcomeRetryable reports whether writing an outcome failed because
// Postgres could not be reached, the connection went away under the
// statement (a server restarting closes them all), or the server takes no
// writes (25006 read_only_sql_transaction: a failover that left the pool on
// the demoted primary or a standby, default_transaction_read_only set by a
// managed service whose disk filled; review helper-302): an outcome
// statement is fenced on the lease token, so one that did commit before
// its answer was lost matches nothing when tried again, and a read-only
// server wrote nothing.
func outcomeRetryable(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "25006" {
		return true
	}
	return database.IsUnavailable(err) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF)
}

var (
	failJobSQL       = schema.Query("FailJob")
	insertAttemptSQL = schema.Query("InsertAttempt")
	// recordTxOptions begin record's transaction with its idle time
	// bounded, in one simple-protocol message.
	recordTxOptions = pgx.TxOptions{BeginQuery: "BEGIN; " + boundIdleSQL}
)

// complete records a success: batched with the others finishing now when
// batching is on (the batch is tried again while Postgres is unavailable,
// as long as its attempts' leases last), else (or when the batch failed,
// so nothing of it was written) in a statement of its own, retried while
// Postgres is unavailable until the lease runs out.
func (s *Service) complete(ctx context.Context, ref bus.Ref, l lease) (string, error) {
	c := completion{ref: ref, l: l}
	if s.completions != nil {
		completed, err := s.completions.Do(ctx, c)
		if err == nil {
			return completedOutcome(completed), nil
		}
		s.logger.LogAttrs(ctx, slog.LevelDebug, "batched completion failed; recording the attempt alone",
			slog.Int64("job_id", ref.JobID), slog.String("error", err.Error()))
	}
	var done map[int64]bool
	err := retryWhileUnavailable(ctx, l.end.until(), func(ctx context.Context) error {
		var err error
		done, err = s.completeJobs(ctx, []completion{c})
		return err
	})
	if err != nil {
		return "", fmt.Errorf("record success of attempt %d of job %d: %w", ref.Attempt, ref.JobID, err)
	}
	return completedOutcome(done[ref.JobID]), nil
}

// completedOutcome is the outcome recorded: "" when the lease was lost.
func completedOutcome(completed bool) string {
	if completed {
		return "completed"
	}
	return ""
}

// errorText makes err's text storable: valid UTF-8 without NUL (Postgres text
// accepts neither), at most maxErrorText bytes.
func errorText(err error) string {
	s := strings.ToValidUTF8(safeErrorString(err), "\uFFFD")
	s = strings.ReplaceAll(s, "\x00", "\uFFFD")
	if len(s) <= maxErrorText {
		return s
	}
	cut := maxErrorText
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}

// safeErrorString is err.Error(), or a note that it panicked: a handler's
// error type is the handler's code, and its Error method runs outside the
// handler's recover.
func safeErrorString(err error) (s string) {
	defer func() {
		if p := recover(); p != nil {
			s = fmt.Sprintf("the error's text is unavailable: its Error method (%T) panicked: %v", err, p)
		}
	}()
	return err.Error()
}
