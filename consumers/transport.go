package consumers

import (
	"context"
	"log/slog"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inlet-dev/inlet/internal/bus"
	"github.com/inlet-dev/inlet/internal/database"
)

// NATS connects to the NATS JetStream transport that `inlet streamer`
// publishes on (bus.kind: nats). Close it after the Service stops.
func NATS(ctx context.Context, url, name string, logger *slog.Logger) (message.Subscriber, error) {
	return bus.NewNATS(ctx, bus.NATSConfig{URL: url, Name: name, Logger: logger})
}

// OpenPool opens a pool for a consumer service: it assumes the webhook_worker
// role on every connection, so the service can read events and record
// outcomes and nothing else. The login role must be a member of
// webhook_worker (GRANT webhook_worker TO my_consumer).
func OpenPool(ctx context.Context, url, appName string) (*pgxpool.Pool, error) {
	return database.Open(ctx, url, database.Options{Role: "webhook_worker", AppName: appName})
}
