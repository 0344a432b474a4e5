package natsbus

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/internal/natstest"
	"github.com/inlet-dev/inlet/internal/testwait"
)

// While the connection to NATS is down the bus is not healthy (the streamer's
// and the consumers' /readyz say so), and it is again once the client has
// reconnected. Healthy looked only at stalled subscriptions: a streamer
// publishing into a dead server answered ready.
func TestHealthyReportsALostConnection(t *testing.T) {
	srv := natstest.Start(t)
	n, _, publishRef, receive := subscribed(t, srv)
	publishRef(1)
	receive(1)
	if err := n.Healthy(); err != nil {
		t.Fatalf("healthy while connected: %v", err)
	}

	srv.Stop()
	testwait.Eventually(t, 30*time.Second, "Healthy to report the lost connection", func() (bool, string) {
		err := n.Healthy()
		return err != nil && strings.Contains(err.Error(), "not connected to "+srv.URL()), "Healthy: " + errString(err)
	})

	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, 30*time.Second, "Healthy again after the reconnect", func() (bool, string) {
		err := n.Healthy()
		return err == nil, "Healthy: " + errString(err)
	})
}

// Ping answers while JetStream does, and fails while the server is down.
func TestPingFollowsJetStream(t *testing.T) {
	srv := natstest.Start(t)
	n, _, _, _ := subscribed(t, srv)
	if err := n.Ping(t.Context()); err != nil {
		t.Fatalf("Ping while the server runs: %v", err)
	}
	srv.Stop()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	if err := n.Ping(ctx); err == nil {
		t.Fatal("Ping answered while the server was down")
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, 30*time.Second, "Ping again after the restart", func() (bool, string) {
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		defer cancel()
		err := n.Ping(ctx)
		return err == nil, errString(err)
	})
}
