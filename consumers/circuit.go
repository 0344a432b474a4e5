package consumers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/schema/queries"
)

// failed counts a failed attempt of handler against its circuit breaker, in
// the transaction that records the failure (so a fenced-out outcome counts
// nothing), and logs the circuit opening once, in the consumer whose
// failure opened it.
func (s *Service) failed(ctx context.Context, tx pgx.Tx, handler string) error {
	if !s.breakers[handler] {
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

// succeeded restarts the failure counts of the handlers among names that
// have a breaker and closes their circuits, logging each circuit that
// closes. It runs after the successes committed; a failure here is logged
// and the next success tries again.
func (s *Service) succeeded(ctx context.Context, names []string) {
	var hs []string
	for _, n := range names {
		if s.breakers[n] && !slices.Contains(hs, n) {
			hs = append(hs, n)
		}
	}
	if len(hs) == 0 {
		return
	}
	rows, err := queries.New(s.cfg.Pool).HandlersSucceeded(ctx, hs)
	if err != nil {
		s.logger.LogAttrs(ctx, slog.LevelWarn, "reset circuit breakers failed", slog.Any("handlers", hs), slog.String("error", err.Error()))
		return
	}
	for _, r := range rows {
		if r.Was != "closed" {
			s.logger.LogAttrs(ctx, slog.LevelInfo, "circuit closed: a probe succeeded", slog.String("handler", r.Handler), slog.String("was", r.Was))
		}
	}
}
