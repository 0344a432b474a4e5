package streamer_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/inlet-dev/inlet/internal/testwait"
	"github.com/inlet-dev/inlet/streamer"
)

// A streamer is not healthy while its Start is under way (here it waits to
// open the replication stream) nor once its Stop has begun: it claims nothing
// then, and inlet streamer's /readyz must not answer ready (review
// helper-253). Between the two it is.
func TestHealthyOnlyBetweenStartAndStop(t *testing.T) {
	t.Parallel()
	b := setup(t, "h")
	ctx := context.Background()
	entered := make(chan struct{})
	release := make(chan struct{})
	first := true
	s := b.newStreamer(t, streamer.Config{
		PollInterval: 50 * time.Millisecond,
		ReplicationConnect: func(ctx context.Context) (*pgconn.PgConn, error) {
			if first { // Start's prepare; the run loop's retries are not waited on
				first = false
				close(entered)
				select {
				case <-release:
				case <-ctx.Done():
				}
			}
			return nil, errors.New("replication unreachable (test)")
		},
	})

	started := make(chan error, 1)
	go func() { started <- s.Start(ctx) }()
	<-entered
	err := s.Healthy(ctx)
	if err == nil || !strings.Contains(err.Error(), "starting") {
		t.Errorf("Healthy while Start waits for the replication stream = %v, want an error saying it is starting", err)
	}
	close(release)
	if err := <-started; err != nil {
		t.Fatalf("start: %v", err)
	}
	if err := s.Healthy(ctx); err != nil {
		t.Fatalf("Healthy once started: %v", err)
	}

	stopped := make(chan struct{})
	go func() { s.Stop(); close(stopped) }()
	testwait.Eventually(t, 10*time.Second, "Healthy to say the streamer is stopping", func() (bool, string) {
		err := s.Healthy(ctx)
		return err != nil && strings.Contains(err.Error(), "stopping"), "Healthy: " + errString(err)
	})
	<-stopped
	if err := s.Healthy(ctx); err == nil {
		t.Error("Healthy after Stop returned nil; want an error: the streamer claims nothing more")
	}
}

func errString(err error) string {
	if err == nil {
		return "nil"
	}
	return err.Error()
}
