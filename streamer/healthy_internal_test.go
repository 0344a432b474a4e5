package streamer

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/consumers/bus/natsbus"
	"github.com/inlet-dev/inlet/internal/natstest"
	"github.com/inlet-dev/inlet/internal/testwait"
)

// A refusal speaks for the bus while it is fresh, even if the bus answers a
// ping (a stream that refuses while JetStream answers: full, discarding new
// messages); once nothing was refused for refusalFresh (nothing to publish
// since), the bus is pinged, so an idle streamer's health follows the bus.
func TestHealthyAsksTheBusOnceARefusalIsStale(t *testing.T) {
	t.Cleanup(natstest.Cleanup)
	srv := natstest.Start(t)
	ctx := context.Background()
	n, err := natsbus.New(ctx, natsbus.Config{URL: srv.URL(), Name: "inlet-streamer", Replicas: 1, Storage: "file", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	s := &Streamer{cfg: Config{Publisher: n}}
	if err := s.Healthy(ctx); err != nil {
		t.Fatalf("healthy before any publish: %v", err)
	}

	refuse := func(at time.Time) {
		s.lastRefused.Store(at.UnixNano())
		s.refused.Store(&publishRefusal{since: at, topic: "inlet.jobs.h", err: errors.New("maximum messages exceeded")})
	}
	refuse(time.Now())
	if err := s.Healthy(ctx); err == nil {
		t.Fatal("healthy right after a refusal, though JetStream answers pings: a fresh refusal must count")
	}
	refuse(time.Now().Add(-refusalFresh - time.Second))
	if err := s.Healthy(ctx); err != nil {
		t.Fatalf("a stale refusal with JetStream answering: %v, want healthy (nothing was refused since)", err)
	}

	srv.Stop()
	testwait.Eventually(t, 30*time.Second, "a stale refusal with JetStream down to be unhealthy", func() (bool, string) {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		err := s.Healthy(pctx)
		return err != nil, "Healthy: nil"
	})
}
