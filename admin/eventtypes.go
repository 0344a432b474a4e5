package admin

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/schema/queries"
)

// EventType is one (source, event type) seen, from event_types.
type EventType struct {
	Source string `json:"source"`
	// Type is the event type; "_other" counts the source's types past the
	// cap (silence.max_types_per_source).
	Type      string    `json:"type"`
	FirstSeen time.Time `json:"first_seen"`
	LastSeen  time.Time `json:"last_seen"`
	// Events stored, and of them those that created no job.
	Events         int64 `json:"events"`
	UnroutedEvents int64 `json:"unrouted_events"`
	// Routed says whether the latest event of the type created a job; nil
	// for a type seen only before event_types existed.
	Routed *bool `json:"routed"`
	// Handlers are those whose enabled subscriptions match the type now: a
	// handler here on an unrouted type can catch its events up with
	// inlet replay --handler H --unrouted.
	Handlers []string `json:"handlers"`
}

// Unrouted reports whether the latest event of the type created no job.
func (t EventType) Unrouted() bool { return t.Routed != nil && !*t.Routed }

// EventTypes folds the arrivals not yet folded (at most maxPerSource named
// types per source, as the streamer folds) and lists every type seen,
// unrouted first.
func EventTypes(ctx context.Context, db DB, maxPerSource int) ([]EventType, error) {
	var out []EventType
	err := writeTx(ctx, db, func(tx pgx.Tx) error {
		if err := foldEventTypes(ctx, tx, maxPerSource); err != nil {
			return err
		}
		rows, err := queries.New(tx).AdminEventTypes(ctx)
		if err != nil {
			return err
		}
		out = make([]EventType, len(rows))
		for i, r := range rows {
			out[i] = EventType{Source: r.Provider, Type: r.EventType, FirstSeen: r.FirstSeen, LastSeen: r.LastSeen,
				Events: r.Events, UnroutedEvents: r.UnroutedEvents, Routed: r.Routed, Handlers: r.Handlers}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list event types: %w", err)
	}
	return out, nil
}

// FoldEventTypes folds the arrivals not yet folded into event_types, so
// what follows (a listing, inlet replay --unrouted) sees every event
// committed so far.
func FoldEventTypes(ctx context.Context, db DB, maxPerSource int) error {
	if err := writeTx(ctx, db, func(tx pgx.Tx) error { return foldEventTypes(ctx, tx, maxPerSource) }); err != nil {
		return fmt.Errorf("fold event types: %w", err)
	}
	return nil
}

func foldEventTypes(ctx context.Context, tx pgx.Tx, maxPerSource int) error {
	if maxPerSource < 1 {
		return invalid("max types per source %d: must be at least 1", maxPerSource)
	}
	_, err := queries.New(tx).FoldEventTypes(ctx, int32(min(maxPerSource, math.MaxInt32)))
	return err
}
