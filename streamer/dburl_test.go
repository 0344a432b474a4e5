package streamer_test

import (
	"context"
	"strings"
	"testing"

	"github.com/inlet-dev/inlet/streamer"
)

// ConnectReplication (the documented Config.ReplicationConnect) wrapped
// pgx's parse error as is, and the streamer logs that error ("replication
// stream lost"). pgx redacts "password=..." but not libpq's equally valid
// "password = ...", so the password reached the error and the log (a review
// proved it). Now it says only that the URL is invalid, as database.Open
// does.
func TestConnectReplicationErrorNeverQuotesThePassword(t *testing.T) {
	const pw = "canary-db-password"
	_, err := streamer.ConnectReplication(context.Background(), "host=127.0.0.1 user=inlet password = "+pw+" dbname=inlet sslmode=bogus")
	if err == nil {
		t.Fatal("connected with an invalid sslmode")
	}
	if strings.Contains(err.Error(), pw) {
		t.Errorf("error holds the database password: %v", err)
	}
}
