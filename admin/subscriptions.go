package admin

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/schema/queries"
)

// Subscription is one (handler, provider pattern, event type pattern) row.
type Subscription struct {
	Handler          string    `json:"handler"`
	ProviderPattern  string    `json:"provider_pattern"`
	EventTypePattern string    `json:"event_type_pattern"`
	MaxAttempts      int       `json:"max_attempts"`
	Enabled          bool      `json:"enabled"`
	UpdatedAt        time.Time `json:"updated_at"`
	OpenJobs         int64     `json:"open_jobs"` // pending, leased or failed jobs of the handler
}

// ListSubscriptions returns handler's subscriptions ("" for all).
func ListSubscriptions(ctx context.Context, db DB, handler string) ([]Subscription, error) {
	tx, err := db.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, fmt.Errorf("list subscriptions: %w", err)
	}
	defer tx.Rollback(ctx)
	rows, err := queries.New(tx).AdminSubscriptions(ctx, handler)
	if err != nil {
		return nil, fmt.Errorf("list subscriptions of %q: %w", handler, err)
	}
	subs := make([]Subscription, len(rows))
	for i, r := range rows {
		subs[i] = Subscription{Handler: r.Handler, ProviderPattern: r.ProviderPattern, EventTypePattern: r.EventTypePattern,
			MaxAttempts: int(r.MaxAttempts), Enabled: r.Enabled, UpdatedAt: r.UpdatedAt, OpenJobs: r.OpenJobs}
	}
	return subs, nil
}

// SetSubscriptionsEnabled switches handler's subscriptions on or off: all of
// them, or only the one with both patterns given. New events then get (or no
// longer get) jobs for it; existing jobs are left alone. It returns how many
// rows changed, and ErrNotFound when the handler has no such subscription.
func SetSubscriptionsEnabled(ctx context.Context, db DB, handler, providerPattern, eventTypePattern string, enabled bool) (int64, error) {
	if handler == "" {
		return 0, invalid("a handler is required")
	}
	if (providerPattern == "") != (eventTypePattern == "") {
		return 0, invalid("give both the provider and the event type pattern of one subscription, or neither for all of the handler's")
	}
	var changed int64
	err := pgx.BeginTxFunc(ctx, db, pgx.TxOptions{}, func(tx pgx.Tx) error {
		q := queries.New(tx)
		exists, err := q.AdminSubscriptionExists(ctx, queries.AdminSubscriptionExistsParams{
			Handler: handler, ProviderPattern: providerPattern, EventTypePattern: eventTypePattern})
		if err != nil {
			return err
		}
		if !exists {
			return notFound("handler %q has no such subscription", handler)
		}
		changed, err = q.AdminSetSubscriptionsEnabled(ctx, queries.AdminSetSubscriptionsEnabledParams{
			Handler: handler, ProviderPattern: providerPattern, EventTypePattern: eventTypePattern, Enabled: enabled})
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("set subscriptions of %q enabled=%v: %w", handler, enabled, err)
	}
	return changed, nil
}
