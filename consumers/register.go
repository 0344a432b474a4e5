package consumers

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/inlet-dev/inlet/schema"
	"github.com/inlet-dev/inlet/schema/queries"
)

// Register writes the service's subscriptions, in one transaction: every
// declared (handler, provider pattern, event type pattern) is enabled with
// the handler's MaxAttempts, and each handler's rows for patterns it no
// longer declares are disabled. Events stored after the commit get jobs for
// the new set. Registering an unchanged set writes nothing. Rows of handlers
// this service does not declare are left alone: another service may run them.
// The limits of a handler another database role is also given are shared:
// see registerLimits.
func (s *Service) Register(ctx context.Context) error {
	// Handlers by name, each one's patterns by (provider, type): two
	// registrations of a handler (replicas starting together, two services
	// sharing it) lock its rows in one order, never crosswise.
	handlers := slices.Clone(s.cfg.Handlers)
	slices.SortFunc(handlers, func(a, b Handler) int { return strings.Compare(a.Name, b.Name) })
	// Its locks (subscriptions, handler_limits) are ones ingress's fan-out
	// and the streamers' claims need: BEGIN bounds how long the session may
	// sit idle holding them (recordTxOptions), as record's does.
	var shared []sharedLimits
	err := pgx.BeginTxFunc(ctx, s.cfg.Pool, recordTxOptions, func(tx pgx.Tx) error {
		for _, h := range handlers {
			h.Patterns = slices.Clone(h.Patterns)
			slices.SortFunc(h.Patterns, func(a, b Pattern) int {
				return cmp.Or(strings.Compare(a.Provider, b.Provider), strings.Compare(a.EventType, b.EventType))
			})
			providers := make([]string, len(h.Patterns))
			types := make([]string, len(h.Patterns))
			for i, p := range h.Patterns {
				var expr *string
				if h.Filter != "" {
					expr = &h.Filter
				}
				var orderKey *string
				if h.OrderKey != "" {
					orderKey = &h.OrderKey
				}
				if _, err := tx.Exec(ctx, schema.Query("UpsertSubscription"), h.Name, p.Provider, p.EventType, h.MaxAttempts, expr,
					orderKey, cmp.Or(h.OrderPolicy, "block")); err != nil {
					if isRowSecurityViolation(err) && strings.Contains(err.Error(), "consumer_in_scope") {
						return fmt.Errorf("handler %q may not subscribe to (%q, %q): outside this database role's scopes (inlet roles list; widen with inlet roles create-consumer NAME --handlers … --scope %s:%s): %w",
							h.Name, p.Provider, p.EventType, p.Provider, p.EventType, err)
					}
					if isRowSecurityViolation(err) {
						return fmt.Errorf("handler %q is not one of this database role's handlers (inlet roles create-consumer NAME --handlers …,%s, or run as webhook_worker): %w",
							h.Name, h.Name, err)
					}
					return fmt.Errorf("upsert subscription of handler %q to (%q, %q): %w", h.Name, p.Provider, p.EventType, err)
				}
				providers[i], types[i] = p.Provider, p.EventType
			}
			sl, err := registerLimits(ctx, tx, h)
			if err != nil {
				return err
			}
			if sl != sharedLimitsNone {
				shared = append(shared, sl)
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
	// Said once per registration, after its commit.
	for _, sl := range shared {
		msg := "limits of a shared handler left as another database role's registration set them: this consumer declares none"
		if sl.changed {
			msg = "limits of a shared handler changed by this registration: every database role given the handler should declare the same limits"
		}
		s.logger.LogAttrs(ctx, slog.LevelWarn, msg, slog.String("handler", sl.handler))
	}
	return nil
}

// isRowSecurityViolation reports whether err is PostgreSQL refusing a row
// that its row-level security policies do not let the role write: a
// consumer role (011_consumer_roles) registering a handler not its own, or
// a pattern outside its scopes (038_consumer_role_scopes: the policy named
// consumer_in_scope_…).
func isRowSecurityViolation(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "42501" && strings.Contains(pgErr.Message, "row-level security")
}

// sharedLimits is what registerLimits did to the limits of a handler
// another database role is also given, for Register to warn about.
type sharedLimits struct {
	handler string
	// changed: this registration rewrote settings another role's may have
	// set; otherwise it declares none and left the row.
	changed bool
}

// sharedLimitsNone: nothing to warn about.
var sharedLimitsNone = sharedLimits{}

// registerLimits writes h's rate limit, in-flight limit and breaker
// settings, or removes its row when it has none (its jobs are then claimed
// as every other handler's).
//
// A handler another consumer role is also given (consumer_roles, besides
// the role registering: 080 another_role_given) has one row for all of
// them, which that role's consumers may have written, and the registration
// never removes what it does not declare (review helper-331: a role
// declaring no limits removed the other's, an open circuit included). With
// no limits declared it leaves the row; with some, it writes each kind it
// declares (rate and burst, in-flight, breaker; the last registration
// wins) and keeps the others, so an open circuit stays open. Every role
// sharing a handler should declare the same limits. The returned
// sharedLimits says which of the two happened to a row that exists.
func registerLimits(ctx context.Context, tx pgx.Tx, h Handler) (sharedLimits, error) {
	q := queries.New(tx)
	st, err := q.HandlerLimitsShared(ctx, h.Name)
	if err != nil {
		return sharedLimitsNone, fmt.Errorf("ask whether another database role is given handler %q: %w", h.Name, err)
	}
	if !h.limited() {
		if st.Shared {
			if st.Limited {
				return sharedLimits{handler: h.Name}, nil
			}
			return sharedLimitsNone, nil
		}
		if _, err := q.DeleteHandlerLimits(ctx, h.Name); err != nil {
			return sharedLimitsNone, fmt.Errorf("remove limits of handler %q: %w", h.Name, err)
		}
		return sharedLimitsNone, nil
	}
	p := queries.UpsertHandlerLimitsParams{Handler: h.Name}
	if h.RateLimit > 0 {
		burst := int32(h.Burst) //nolint:gosec // G115: validate caps Burst at 1,000,000
		p.RatePerSecond, p.Burst = &h.RateLimit, &burst
	}
	if h.MaxInFlight > 0 {
		n := int32(h.MaxInFlight) //nolint:gosec // G115: validate caps MaxInFlight at 1,000,000
		p.MaxInFlight = &n
	}
	if h.BreakerFailures > 0 {
		n := int32(h.BreakerFailures) //nolint:gosec // G115: validate caps BreakerFailures at 10,000
		p.BreakerFailures, p.BreakerProbeInterval = &n, &h.BreakerProbeInterval
	}
	if st.Shared {
		n, err := q.UpsertSharedHandlerLimits(ctx, queries.UpsertSharedHandlerLimitsParams(p))
		if err != nil {
			return sharedLimitsNone, fmt.Errorf("register limits of shared handler %q: %w", h.Name, err)
		}
		if st.Limited && n > 0 {
			return sharedLimits{handler: h.Name, changed: true}, nil
		}
		return sharedLimitsNone, nil
	}
	if _, err := q.UpsertHandlerLimits(ctx, p); err != nil {
		return sharedLimitsNone, fmt.Errorf("register limits of handler %q: %w", h.Name, err)
	}
	return sharedLimitsNone, nil
}
