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
	// Filter is the subscription's content filter (a CEL expression an
	// event must also pass); empty when it has none.
	Filter string `json:"filter,omitempty"`
	// Limits are the handler's rate limit, in-flight limit and circuit
	// breaker (webhook_ingress.handler_limits); nil when it has none.
	Limits *Limits `json:"limits,omitempty"`
}

// Limits are a handler's limits across every replica and the state of its
// circuit breaker. A zero setting is none.
type Limits struct {
	RateLimit            float64    `json:"rate_limit,omitempty"`
	Burst                int        `json:"burst,omitempty"`
	MaxInFlight          int        `json:"max_in_flight,omitempty"`
	BreakerFailures      int        `json:"breaker_failures,omitempty"`
	BreakerProbeInterval string     `json:"breaker_probe_interval,omitempty"`
	ConsecutiveFailures  int        `json:"consecutive_failures"`
	Circuit              string     `json:"circuit"` // closed, open (jobs wait) or half_open (a probe runs)
	CircuitChangedAt     time.Time  `json:"circuit_changed_at"`
	NextProbeAt          *time.Time `json:"next_probe_at,omitempty"`
}

// HandlerLimits reads every limited handler's limits and circuit, by
// handler name.
func HandlerLimits(ctx context.Context, db queries.DBTX) (map[string]*Limits, error) {
	rows, err := queries.New(db).HandlerLimitsState(ctx)
	if err != nil {
		return nil, fmt.Errorf("read handler limits: %w", err)
	}
	out := make(map[string]*Limits, len(rows))
	for _, r := range rows {
		l := &Limits{ConsecutiveFailures: int(r.ConsecutiveFailures), Circuit: r.Circuit, CircuitChangedAt: r.CircuitChangedAt, NextProbeAt: r.NextProbeAt}
		if r.RatePerSecond != nil && r.Burst != nil {
			l.RateLimit, l.Burst = *r.RatePerSecond, int(*r.Burst)
		}
		if r.MaxInFlight != nil {
			l.MaxInFlight = int(*r.MaxInFlight)
		}
		if r.BreakerFailures != nil && r.BreakerProbeInterval != nil {
			l.BreakerFailures, l.BreakerProbeInterval = int(*r.BreakerFailures), r.BreakerProbeInterval.String()
		}
		out[r.Handler] = l
	}
	return out, nil
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
	limits, err := HandlerLimits(ctx, tx)
	if err != nil {
		return nil, err
	}
	subs := make([]Subscription, len(rows))
	for i, r := range rows {
		subs[i] = Subscription{Handler: r.Handler, ProviderPattern: r.ProviderPattern, EventTypePattern: r.EventTypePattern,
			MaxAttempts: int(r.MaxAttempts), Enabled: r.Enabled, UpdatedAt: r.UpdatedAt, OpenJobs: r.OpenJobs, Limits: limits[r.Handler]}
		if r.Filter != nil {
			subs[i].Filter = *r.Filter
		}
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
