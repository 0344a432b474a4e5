package log

import (
	"context"
	"log/slog"

	"github.com/inlet-dev/inlet/consumers"
)

// New returns a handler that logs every event at info level on logger
// (slog.Default() when nil) and always succeeds. The handler name is not
// logged: give logger a "handler" attribute when several share it.
func New(logger *slog.Logger) consumers.HandlerFunc {
	if logger == nil {
		logger = slog.Default()
	}
	return func(ctx context.Context, e *consumers.Event) error {
		logger.LogAttrs(ctx, slog.LevelInfo, "webhook event",
			slog.Int64("job_id", e.JobID),
			slog.Int64("event_id", e.EventID),
			slog.String("provider", e.Provider),
			slog.String("event_type", e.EventType),
			slog.Int("attempt", e.Attempt),
			slog.Int("body_bytes", len(e.Body)),
		)
		return nil
	}
}
