package natsbus_test

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/consumers/bus/natsbus"
)

// TestUnreachableNATSAtStartSaysSo: a start with no NATS server to reach
// fails saying it could not be reached, not blaming JetStream.
//
// Regression test (review helper-113; fixed: the text describes the
// behaviour before the fix). When the NATS server cannot be reached at all, `inlet streamer` and
// `inlet consumer` (openBus → natsbus.New) wait 30 s without a log line and
// then exit with
//
//	create or update JetStream stream INLET_JOBS at nats://host:4222 (is JetStream enabled, nats-server -js?): context deadline exceeded
//
// (or "look up JetStream stream …" for an SDK consumer without stream
// settings). The one-line reason points the operator at the server's
// JetStream configuration, while the server is simply not there (connection
// refused, a wrong host or port, DNS): New connects with
// RetryOnFailedConnect (nats.go:124), so nats.Connect never reports the
// failure, and ensureStream (nats.go:187/200) words every failure of its
// JetStream request as a JetStream problem. The design's contract is "non-zero
// with a one-line reason on error"; this reason is wrong.
//
// Here: a loopback port nobody listens on, New given 3 s (the services give
// it 30 s).
//
// Expected: the error says NATS could not be reached/connected (and why,
// e.g. connection refused), not that JetStream may be disabled.
// Actual: "… (is JetStream enabled, nats-server -js?): context deadline
// exceeded".
func TestUnreachableNATSAtStartSaysSo(t *testing.T) {
	// A port that was just free: nothing listens on it.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "nats://" + l.Addr().String()
	l.Close()

	for _, storage := range []string{"file", ""} { // inlet's services; an SDK consumer
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		n, err := natsbus.New(ctx, natsbus.Config{URL: url, Storage: storage, Logger: slog.New(slog.DiscardHandler)})
		cancel()
		if err == nil {
			n.Close()
			t.Fatalf("storage %q: New succeeded with no NATS server at %s", storage, url)
		}
		msg := err.Error()
		lower := strings.ToLower(msg)
		if strings.Contains(msg, "is JetStream enabled") ||
			!(strings.Contains(lower, "connect") || strings.Contains(lower, "reach") || strings.Contains(lower, "refused")) {
			t.Errorf("storage %q: with no NATS server listening at %s the start fails with %q: it blames JetStream's "+
				"configuration and never says the server could not be reached", storage, url, msg)
		}
	}
}
