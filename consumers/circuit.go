package consumers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/schema/queries"
)

// breaker is what this process keeps of a handler's circuit breaker, whose
// state is its handler_limits row.
type breaker struct {
	// failing serializes the handler's failure transactions in this
	// process. Each updates the handler's one handler_limits row
	// (HandlerFailed), so they commit one after another anyway; run at
	// once, each held a pool connection while it waited for the row, and
	// with the row busy (a streamer's limited claim, a slow commit, an
	// operator's transaction) every connection of the pool: the other
	// handlers' reads, completions and lease extensions waited behind one
	// handler's failures (review helper-118).
	failing sync.Mutex

	// resetting is true while a reset (HandlerSucceeded) runs; resetDue
	// asks it for one more, with latest, the newest success requested
	// (the database keeps the newest of every process's: last_success_at).
	mu                  sync.Mutex
	resetting, resetDue bool
	latest              success
}

// failed counts a failed attempt of handler against its circuit breaker, in
// the transaction that records the failure (so a fenced-out outcome counts
// nothing), and logs the circuit opening once, in the consumer whose
// failure opened it. The caller holds the handler's breaker.failing.
func (s *Service) failed(ctx context.Context, tx pgx.Tx, handler string) error {
	if s.breakers[handler] == nil {
		return nil
	}
	r, err := queries.New(tx).HandlerFailed(ctx, handler)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil // its limits are not registered (yet): nothing to count
	case err != nil:
		return fmt.Errorf("count failure of handler %q for its circuit breaker: %w", handler, err)
	}
	if r.Was != "open" && r.Now == "open" {
		s.logger.LogAttrs(ctx, slog.LevelWarn, "circuit opened: the handler's jobs wait, one probe per interval",
			slog.String("handler", handler), slog.String("was", r.Was))
	}
	return nil
}

// failingLock holds handler's failure transactions to one at a time in
// this process (breaker.failing); the returned func releases it. A handler
// without a breaker has nothing to serialize.
func (s *Service) failingLock(handler string) func() {
	b := s.breakers[handler]
	if b == nil {
		return func() {}
	}
	b.failing.Lock()
	return b.failing.Unlock
}

// success is a committed success of a handler with a breaker: the job, and
// the partition key that finds it (HandlerSucceeded reads its completed_at),
// and when its completion began on this process's clock (the newest by it is
// the one reset with).
type success struct {
	job       int64
	partition time.Time
	at        time.Time
}

// succeeded counts the committed successes among done against their
// handlers' breakers: each handler's consecutive failures become those
// recorded since its latest success, and its circuit closes unless they
// reach breaker_failures (HandlerSucceeded). It runs off the caller's
// goroutine: the caller is the completion writer of every handler, and a
// handler's busy handler_limits row must not hold up the others'
// completions. While a handler's reset runs, later successes wait for it and
// go as one more, with the newest of them (by at: when their completion
// began, which is the order of their completed_at). A failure is logged and
// the next success tries again.
func (s *Service) succeeded(done []completion, at time.Time) {
	for _, c := range done {
		b := s.breakers[c.ref.Handler]
		if b == nil {
			continue
		}
		b.mu.Lock()
		if b.latest.job == 0 || !at.Before(b.latest.at) {
			b.latest = success{job: c.ref.JobID, partition: c.l.partition, at: at}
		}
		if b.resetting {
			b.resetDue = true
			b.mu.Unlock()
			continue
		}
		b.resetting = true
		b.mu.Unlock()
		s.resets.Add(1)
		go s.resetLoop(c.ref.Handler, b)
	}
}

// resetLoop resets handler's breaker with its latest success until no
// success is due.
func (s *Service) resetLoop(handler string, b *breaker) {
	defer s.resets.Done()
	for {
		b.mu.Lock()
		latest := b.latest
		b.mu.Unlock()
		s.reset(handler, latest)
		b.mu.Lock()
		if !b.resetDue {
			b.resetting = false
			b.mu.Unlock()
			return
		}
		b.resetDue = false
		b.mu.Unlock()
	}
}

// reset runs HandlerSucceeded for handler's success ok, under the row's lock
// (LockHandlerLimits first, so the statement's snapshot holds every failure
// counted on the row), within recordTimeout even while the service stops.
func (s *Service) reset(handler string, ok success) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(s.workCtx), recordTimeout)
	defer cancel()
	var r queries.HandlerSucceededRow
	// The row lock every streamer's limited claim of handler needs: BEGIN
	// bounds how long the session may sit idle holding it
	// (recordTxOptions), so a consumer frozen mid-reset does not stop the
	// handler's delivery on every replica (review helper-234).
	err := pgx.BeginTxFunc(ctx, s.cfg.Pool, recordTxOptions, func(tx pgx.Tx) error {
		q := queries.New(tx)
		if err := q.LockHandlerLimits(ctx, handler); err != nil {
			return err
		}
		var err error
		r, err = q.HandlerSucceeded(ctx, queries.HandlerSucceededParams{JobID: ok.job, EventReceivedAt: ok.partition, Handler: handler})
		if errors.Is(err, pgx.ErrNoRows) {
			return nil // nothing to change, or the job is no longer completed (replayed)
		}
		return err
	})
	if err != nil {
		s.logger.LogAttrs(ctx, slog.LevelWarn, "reset circuit breaker failed", slog.String("handler", handler), slog.String("error", err.Error()))
		return
	}
	if r.Was != "" && r.Was != "closed" && r.Now == "closed" {
		s.logger.LogAttrs(ctx, slog.LevelInfo, "circuit closed: an attempt succeeded", slog.String("handler", handler), slog.String("was", r.Was))
	}
}
