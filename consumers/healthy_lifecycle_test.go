package consumers_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/inlet-dev/inlet/consumers"
	"github.com/inlet-dev/inlet/consumers/internal/consumertest"
)

// slowSubscriber holds every Subscribe until release is closed, as a
// JetStream consumer slow to create does.
type slowSubscriber struct {
	message.Subscriber
	entered chan struct{} // closed at the first Subscribe
	release chan struct{}
	first   bool
}

func (s *slowSubscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	if !s.first {
		s.first = true
		close(s.entered)
	}
	select {
	case <-s.release:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return s.Subscriber.Subscribe(ctx, topic)
}

// The service is healthy only while it runs: not before Start, not while
// Start is still subscribing (a readiness probe served before Start, as inlet
// consumer's /readyz, answered ready with nothing subscribed: review
// helper-253), and not from the moment Stop begins to drain.
func TestHealthyOnlyBetweenStartAndStop(t *testing.T) {
	t.Parallel()
	b := setup(t)
	running := make(chan struct{}, 1)
	finish := make(chan struct{})
	cfg := b.config(consumers.Handler{Name: "h", Func: func(ctx context.Context, _ *consumers.Event) error {
		running <- struct{}{}
		select {
		case <-finish:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}})
	sub := &slowSubscriber{Subscriber: b.Bus, entered: make(chan struct{}), release: make(chan struct{})}
	cfg.Subscriber = sub
	svc, err := consumers.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	wantErr := func(when, want string) {
		t.Helper()
		if err := svc.Healthy(); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Healthy %s = %v, want an error saying %q", when, err, want)
		}
	}
	wantErr("before Start", "not started")

	started := make(chan error, 1)
	go func() { started <- svc.Start(context.Background()) }()
	<-sub.entered
	wantErr("while Start subscribes", "starting: subscribing handlers")
	close(sub.release)
	if err := <-started; err != nil {
		t.Fatalf("start: %v", err)
	}
	if err := svc.Healthy(); err != nil {
		t.Fatalf("Healthy once started: %v", err)
	}

	b.StartStreamer(t, consumertest.StreamerOptions{})
	b.JobID(t, b.InsertEvent(t, consumertest.EventParams{}), "h")
	<-running
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stopped := make(chan error, 1)
	go func() { stopped <- svc.Stop(ctx) }()
	consumertest.WaitFor(t, wait, "Healthy to say the service is stopping", func() bool {
		err := svc.Healthy()
		return err != nil && strings.Contains(err.Error(), "stopping")
	})
	close(finish)
	if err := <-stopped; err != nil {
		t.Fatalf("stop: %v", err)
	}
	wantErr("after Stop", "stopped")
}
