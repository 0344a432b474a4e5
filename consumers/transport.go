package consumers

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inlet-dev/inlet/internal/database"
)

// The subscriber comes from the transport's own package, so that the
// consumers package carries none: natsbus.New (package
// github.com/inlet-dev/inlet/consumers/bus/natsbus) for the NATS JetStream
// transport `inlet streamer` publishes on (bus.kind: nats), bus.NewGoChannel
// when the streamer runs in the same process.

// OpenPool opens a pool for a consumer service: it assumes the webhook_worker
// role on every connection, so the service can read events and record
// outcomes and nothing else. The login role must be a member of
// webhook_worker (GRANT webhook_worker TO my_consumer).
//
// webhook_worker runs every handler (the single-team setup). A team whose
// consumers should reach only their own handlers runs as a consumer role of
// its own: see OpenPoolAs.
func OpenPool(ctx context.Context, url, appName string) (*pgxpool.Pool, error) {
	return OpenPoolAs(ctx, url, "webhook_worker", appName)
}

// OpenPoolAs is OpenPool assuming role instead of webhook_worker: a
// per-consumer role made by `inlet roles create-consumer NAME --handlers
// a,b` (webhook_consumer_NAME), which PostgreSQL's row-level security holds
// to the jobs, subscriptions and event bodies of handlers a and b. The
// login role must be a member of it (inlet roles create-consumer --member
// LOGIN). Every handler of the Service must be one of the role's: Start
// fails naming the first that is not.
func OpenPoolAs(ctx context.Context, url, role, appName string) (*pgxpool.Pool, error) {
	return database.Open(ctx, url, database.Options{Role: role, AppName: appName})
}
