package consumers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

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

	// resetting is true while a reset (HandlersSucceeded) runs; resetDue
	// asks it for one more, for successes committed meanwhile.
	mu                  sync.Mutex
	resetting, resetDue bool
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

// succeeded restarts the failure counts of the handlers among names that
// have a breaker and closes their circuits, logging each circuit that
// closes. It runs after the successes committed, off the caller's
// goroutine: the caller is the completion writer of every handler, and a
// handler's busy handler_limits row must not hold up the others'
// completions. A reset already running for a handler runs once more
// instead of a second one starting. A failure is logged and the next
// success tries again.
func (s *Service) succeeded(names []string) {
	for _, n := range names {
		b := s.breakers[n]
		if b == nil {
			continue
		}
		b.mu.Lock()
		if b.resetting {
			b.resetDue = true
			b.mu.Unlock()
			continue
		}
		b.resetting = true
		b.mu.Unlock()
		s.resets.Add(1)
		go func() {
			defer s.resets.Done()
			for {
				s.reset(n)
				b.mu.Lock()
				if !b.resetDue {
					b.resetting = false
					b.mu.Unlock()
					return
				}
				b.resetDue = false
				b.mu.Unlock()
			}
		}()
	}
}

// reset runs HandlersSucceeded for handler, within recordTimeout even while
// the service stops.
func (s *Service) reset(handler string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(s.workCtx), recordTimeout)
	defer cancel()
	rows, err := queries.New(s.cfg.Pool).HandlersSucceeded(ctx, []string{handler})
	if err != nil {
		s.logger.LogAttrs(ctx, slog.LevelWarn, "reset circuit breaker failed", slog.String("handler", handler), slog.String("error", err.Error()))
		return
	}
	for _, r := range rows {
		if r.Was != "closed" {
			s.logger.LogAttrs(ctx, slog.LevelInfo, "circuit closed: a probe succeeded", slog.String("handler", r.Handler), slog.String("was", r.Was))
		}
	}
}
