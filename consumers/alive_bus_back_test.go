package consumers_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/inlet-dev/inlet/consumers"
	"github.com/inlet-dev/inlet/consumers/internal/consumertest"
	"github.com/inlet-dev/inlet/internal/testwait"
)

// switchedHealthBus is the in-process bus with a health the test sets, as
// natsbus reports its own (Healthy): it delivers all the same.
type switchedHealthBus struct {
	message.Subscriber
	mu  sync.Mutex
	err error
}

func (s *switchedHealthBus) Healthy() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

func (s *switchedHealthBus) set(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.err = err
}

// A consumer whose bus says it is not delivering records no liveness, runs
// a reference that reaches it all the same on a lease it extended first (so
// it counts should the process die in the handler), and records its
// liveness as soon as the bus is back, not at its next AliveInterval.
//
// Regression test (review helper-243, fixed by helper-249; see
// TestConsumerCutOffFromNATSIsNotAliveAndSpendsNoAttempts). AliveInterval
// is a minute: no periodic write happens during the test.
func TestConsumerSaysAliveAgainAsSoonAsTheBusIsBack(t *testing.T) {
	t.Parallel()
	b := setup(t)
	sub := &switchedHealthBus{Subscriber: b.Bus}
	type inHandler struct {
		workerID            *string
		seenAt, attemptedAt time.Time
	}
	got := make(chan inHandler, 1)
	cfg := b.config(consumers.Handler{Name: "h", Func: func(hctx context.Context, ev *consumers.Event) error {
		var s inHandler
		if err := b.Admin.QueryRow(hctx, `SELECT j.worker_id, c.seen_at, j.attempted_at
			FROM webhook_ingress.jobs j JOIN webhook_ingress.consumers c ON c.handler = j.handler
			WHERE j.id = $1 AND c.worker_id = 'test-worker'`, ev.JobID).Scan(&s.workerID, &s.seenAt, &s.attemptedAt); err != nil {
			t.Errorf("read the job's lease and the consumer's liveness in the handler: %v", err)
		}
		got <- s
		return nil
	}})
	cfg.Subscriber = sub
	cfg.AliveInterval = time.Minute
	b.start(t, cfg)

	// Past what the write at Start covers (its seen_at is 250 ms ahead), so
	// the lease below begins after it.
	testwait.Eventually(t, wait, "the database clock past the consumer's seen_at", func() (bool, string) {
		var past bool
		if err := b.Admin.QueryRow(context.Background(), `SELECT now() > seen_at
			FROM webhook_ingress.consumers WHERE handler = 'h' AND worker_id = 'test-worker'`).Scan(&past); err != nil {
			return false, err.Error()
		}
		return past, "not yet"
	})
	sub.set(errors.New("nats: not connected (test)"))
	id := b.JobID(t, b.InsertEvent(t, consumertest.EventParams{}), "h")
	refs := b.ClaimOnce(t, time.Minute)
	if len(refs) != 1 || refs[0].JobID != id {
		t.Fatalf("claimed %+v, want job %d", refs, id)
	}
	if err := b.Publish(refs[0]); err != nil {
		t.Fatal(err)
	}
	var s inHandler
	select {
	case s = <-got:
	case <-time.After(wait):
		t.Fatal("handler never called")
	}
	if !s.seenAt.Before(s.attemptedAt) {
		t.Errorf("the consumer recorded its liveness (seen_at %s) after the lease began (%s) while its bus said it was not delivering",
			s.seenAt.Format(time.RFC3339Nano), s.attemptedAt.Format(time.RFC3339Nano))
	}
	if s.workerID == nil || *s.workerID != "test-worker" {
		t.Errorf("the handler ran on a lease its consumer had not extended (worker_id %v): should the process die in it, the attempt would not count", s.workerID)
	}
	b.WaitJobStatus(t, id, "completed", wait)
	b.waitLogged(t, "the bus is not delivering to this consumer", 1)

	sub.set(nil)
	back := time.Now()
	testwait.Eventually(t, 5*time.Second, "the consumer's liveness recorded once the bus is back", func() (bool, string) {
		var seenAt time.Time
		var alive bool
		if err := b.Admin.QueryRow(context.Background(), `SELECT seen_at, alive_until > now()
			FROM webhook_ingress.consumers WHERE handler = 'h' AND worker_id = 'test-worker'`).Scan(&seenAt, &alive); err != nil {
			return false, err.Error()
		}
		return !seenAt.Before(s.attemptedAt) && alive, "seen_at " + seenAt.Format(time.RFC3339Nano)
	})
	t.Logf("liveness recorded %s after the bus was back", time.Since(back))
	b.waitLogged(t, "the bus is delivering to this consumer again", 1)
}
