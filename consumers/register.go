package consumers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/inlet-dev/inlet/schema"
)

// Register writes the service's subscriptions, in one transaction: every
// declared (handler, provider pattern, event type pattern) is enabled with
// the handler's MaxAttempts, and each handler's rows for patterns it no
// longer declares are disabled. Events stored after the commit get jobs for
// the new set. Registering an unchanged set writes nothing. Rows of handlers
// this service does not declare are left alone: another service may run them.
func (s *Service) Register(ctx context.Context) error {
	err := pgx.BeginFunc(ctx, s.cfg.Pool, func(tx pgx.Tx) error {
		for _, h := range s.cfg.Handlers {
			providers := make([]string, len(h.Patterns))
			types := make([]string, len(h.Patterns))
			for i, p := range h.Patterns {
				var expr *string
				if h.Filter != "" {
					expr = &h.Filter
				}
				if _, err := tx.Exec(ctx, schema.Query("UpsertSubscription"), h.Name, p.Provider, p.EventType, h.MaxAttempts, expr); err != nil {
					if isRowSecurityViolation(err) {
						return fmt.Errorf("handler %q is not one of this database role's handlers (inlet roles create-consumer NAME --handlers …,%s, or run as webhook_worker): %w",
							h.Name, h.Name, err)
					}
					return fmt.Errorf("upsert subscription of handler %q to (%q, %q): %w", h.Name, p.Provider, p.EventType, err)
				}
				providers[i], types[i] = p.Provider, p.EventType
			}
			tag, err := tx.Exec(ctx, schema.Query("DisableOtherSubscriptions"), h.Name, providers, types)
			if err != nil {
				return fmt.Errorf("disable old subscriptions of handler %q: %w", h.Name, err)
			}
			if n := tag.RowsAffected(); n > 0 {
				s.logger.LogAttrs(ctx, slog.LevelInfo, "disabled subscriptions no longer declared",
					slog.String("handler", h.Name), slog.Int64("subscriptions", n))
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("register subscriptions: %w", err)
	}
	return nil
}

// isRowSecurityViolation reports whether err is PostgreSQL refusing a row
// that its row-level security policies do not let the role write: a
// consumer role (011_consumer_roles) registering a handler not its own.
func isRowSecurityViolation(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "42501" && strings.Contains(pgErr.Message, "row-level security")
}
