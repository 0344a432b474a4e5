package streamer_test

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/inlet-dev/inlet/streamer"
)

// TestReplicationStartsOnAPoolSizedDatabaseURL (review helper-281, fixed).
// Defect: `inlet streamer` with `wake: replication` refuses to start on the
// DATABASE_URL the project tells operators to use. deployments/README.md
// ("max_connections": "every process has one pool, whose size is
// pool_max_conns in its DATABASE_URL. Set it"), the shipped
// deployments/systemd/etc/inlet/streamer.env and compose.yaml
// (…&pool_max_conns=4), and deployments_test.go (which fails a service URL
// without pool_max_conns) all put pool_max_conns in the streamer's URL.
// cmd/inlet/pipeline.go:newStreamer hands that URL unchanged to
// streamer.ConnectReplication (streamer/replication.go), which parses it with
// pgconn.ParseConfig: every key pgconn does not know becomes a startup
// parameter, so the server gets pool_max_conns=4 and refuses the connection
// (FATAL 42704 unrecognized configuration parameter "pool_max_conns").
// explain() marks 42704 as ErrReplicationSetup, so Start fails and the
// process exits; the operator's only way out is to drop pool_max_conns,
// leaving the pool at pgx's CPU-count default, which the docs warn against.
// (The same root cause breaks the default `wake: notify`: pipeline.go's
// ListenConnect does pgx.ParseConfig(url) on the same URL, so its LISTEN
// connection is refused on every retry and wake-ups come only from the poll
// tick.)
// Setup: a streamer whose ReplicationConnect is ConnectReplication on the
// test database's URL plus pool_max_conns=4, as in streamer.env.
// Expected: Start succeeds, the stream opens, an insert wakes it.
// Observed: Start = "streamer: replication wake source is not set up: connect
// for replication: failed to connect to …: server error: FATAL: unrecognized
// configuration parameter "pool_max_conns" (SQLSTATE 42704)".
// Fixed: ConnectReplication, the LISTEN connect (cmd/inlet/pipeline.go
// listenConnect) and the commands' connections drop the client-side keys
// pgxpool and pgx read (database.DropClientParams) before connecting.
func TestReplicationStartsOnAPoolSizedDatabaseURL(t *testing.T) {
	t.Parallel()
	b := setup(t, "h")
	r := b.replication(t) // the slot's name, and its drop at the end
	c := b.collect(t, "h")
	ctx := context.Background()

	u, err := url.Parse(b.url)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("pool_max_conns", "4") // deployments/systemd/etc/inlet/streamer.env
	u.RawQuery = q.Encode()
	databaseURL := u.String()

	cfg := r.config(time.Hour) // polling off: only the stream wakes it
	cfg.ReplicationConnect = func(ctx context.Context) (*pgconn.PgConn, error) {
		return streamer.ConnectReplication(ctx, databaseURL)
	}
	s := b.newStreamer(t, cfg)
	if err := s.Start(ctx); err != nil {
		t.Fatalf("Start with wake: replication on a DATABASE_URL carrying pool_max_conns=4 (as deployments/systemd streamer.env and compose.yaml ship it): %v\n"+
			"want: the pool's size is the pool's business; the replication connection opens", err)
	}
	defer s.Stop()
	waitReplicationConnected(t, s, 0)
	b.insertEvents(t, 1)
	c.wait(t, 1, 10*time.Second)
	waitStats(t, s, 10*time.Second, "a replication wake-up", func(st streamer.Stats) bool { return st.ReplicationWakeups >= 1 })
}
