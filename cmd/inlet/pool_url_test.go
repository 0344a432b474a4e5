package main

import (
	"context"
	"net/url"
	"testing"

	"github.com/inlet-dev/inlet/internal/pgtest"
)

// withPoolSettings is dbURL with the pool settings a service's DATABASE_URL
// carries in the deployment files (pool_max_conns) and pgxpool's others.
func withPoolSettings(t *testing.T, dbURL string) string {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("pool_max_conns", "4") // deployments/systemd/etc/inlet/streamer.env
	q.Set("pool_min_conns", "1")
	q.Set("pool_max_conn_idle_time", "5m")
	u.RawQuery = q.Encode()
	return u.String()
}

// TestSingleConnectionsOpenOnAPoolSizedURL: the streamer's LISTEN
// connection and the commands' own connections (inlet migrate, inlet roles)
// open on a service's DATABASE_URL as the deployment files ship it, with
// pool_max_conns in it (review helper-281, fixed). They passed every
// setting to the server, which refused the connection (42704
// unrecognized configuration parameter "pool_max_conns"): the shipped
// streamers never listened and woke only on the poll tick.
func TestSingleConnectionsOpenOnAPoolSizedURL(t *testing.T) {
	ctx := context.Background()
	dbURL := withPoolSettings(t, pgtest.NewDatabase(t))

	listen, err := listenConnect(dbURL)(ctx)
	if err != nil {
		t.Fatalf("the streamer's LISTEN connection on a URL with pool_max_conns: %v", err)
	}
	defer listen.Close(ctx)
	if _, err := listen.Exec(ctx, "LISTEN inlet_pool_url_test"); err != nil {
		t.Fatalf("LISTEN: %v", err)
	}

	cmd, err := connectURL(ctx, dbURL, "inlet-test")
	if err != nil {
		t.Fatalf("a command's connection on a URL with pool_max_conns: %v", err)
	}
	defer cmd.Close(ctx)
	var one int
	if err := cmd.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil {
		t.Fatal(err)
	}
}
