package consumers_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/inlet-dev/inlet/consumers"
	"github.com/inlet-dev/inlet/consumers/bus"
	"github.com/inlet-dev/inlet/consumers/internal/consumertest"
	"github.com/inlet-dev/inlet/internal/testwait"
)

// stallBus is the in-process bus with its connection up and subscriptions
// the test says are not consuming, by topic, as natsbus reports them
// (ConnectionHealthy, Stalled, Healthy). It delivers all the same.
type stallBus struct {
	message.Subscriber
	mu      sync.Mutex
	stalled []string
}

func (s *stallBus) ConnectionHealthy() error { return nil }

func (s *stallBus) Stalled() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.stalled)
}

func (s *stallBus) Healthy() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.stalled) > 0 {
		return errors.New("subscriptions not consuming (test): " + strings.Join(s.stalled, ", "))
	}
	return nil
}

func (s *stallBus) set(topics ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stalled = topics
}

// A reference of a handler whose subscription is not consuming (here its
// role topic; it still arrives on the handler's own topic) runs on a lease
// its consumer extended first, not on a liveness write: the write that take
// makes records the other handler only, and the next such take makes none.
// Once the subscription consumes again the handler's liveness is recorded
// at once, not at the next AliveInterval.
//
// Regression test (review helper-251, fixed by helper-258; see
// TestOneStalledDurableLeavesOutOnlyItsHandlersLiveness). AliveInterval is a
// minute: no periodic write happens during the test.
func TestTakeOfAHandlerLeftOutExtendsItsLease(t *testing.T) {
	t.Parallel()
	b := setup(t)
	sub := &stallBus{Subscriber: b.Bus}
	ctx := context.Background()
	seen := func(handler string) (time.Time, bool) {
		var at time.Time
		var alive bool
		if err := b.Admin.QueryRow(ctx, `SELECT seen_at, alive_until > now()
			FROM webhook_ingress.consumers WHERE handler = $1 AND worker_id = 'test-worker'`, handler).Scan(&at, &alive); err != nil {
			t.Errorf("read the liveness of %s: %v", handler, err)
		}
		return at, alive
	}
	type inHandler struct {
		workerID    *string
		attemptedAt time.Time
		seenA       time.Time
	}
	got := make(chan inHandler, 2)
	cfg := b.config(
		consumers.Handler{Name: "a", Func: func(hctx context.Context, ev *consumers.Event) error {
			var s inHandler
			if err := b.Admin.QueryRow(hctx, `SELECT worker_id, attempted_at FROM webhook_ingress.jobs WHERE id = $1`,
				ev.JobID).Scan(&s.workerID, &s.attemptedAt); err != nil {
				t.Errorf("read the job's lease in the handler: %v", err)
			}
			s.seenA, _ = seen("a")
			got <- s
			return nil
		}},
		consumers.Handler{Name: "b", Func: ok},
	)
	cfg.Subscriber = sub
	cfg.AliveInterval = time.Minute
	b.start(t, cfg)

	// Past what the write at Start covers (its seen_at is 250 ms ahead), so
	// the leases below begin after it.
	testwait.Eventually(t, wait, "the database clock past the consumer's seen_at", func() (bool, string) {
		var past bool
		if err := b.Admin.QueryRow(ctx, `SELECT now() > max(seen_at)
			FROM webhook_ingress.consumers WHERE worker_id = 'test-worker'`).Scan(&past); err != nil {
			return false, err.Error()
		}
		return past, "not yet"
	})
	sub.set(bus.RoleTopic("a", ""))

	run := func() inHandler {
		t.Helper()
		id := b.JobID(t, b.InsertEvent(t, consumertest.EventParams{}), "a")
		refs := b.ClaimOnce(t, time.Minute)
		i := slices.IndexFunc(refs, func(r bus.Ref) bool { return r.JobID == id })
		if i < 0 {
			t.Fatalf("claimed %+v, want job %d among them", refs, id)
		}
		if err := b.Publish(refs[i]); err != nil {
			t.Fatal(err)
		}
		select {
		case s := <-got:
			b.WaitJobStatus(t, id, "completed", wait)
			return s
		case <-time.After(wait):
			t.Fatal("handler a never called")
			return inHandler{}
		}
	}
	check := func(which string, s inHandler) {
		t.Helper()
		if !s.seenA.Before(s.attemptedAt) {
			t.Errorf("%s reference: the consumer recorded a's liveness (seen_at %s) after its lease began (%s) while a's role topic was not consuming",
				which, s.seenA.Format(time.RFC3339Nano), s.attemptedAt.Format(time.RFC3339Nano))
		}
		if s.workerID == nil || *s.workerID != "test-worker" {
			t.Errorf("%s reference: a ran on a lease its consumer had not extended (worker_id %v): should the process die in it, the attempt would not count", which, s.workerID)
		}
	}

	first := run()
	check("first", first)
	seenB, aliveB := seen("b")
	if seenB.Before(first.attemptedAt) || !aliveB {
		t.Errorf("the take of a's reference wrote no liveness for b (seen_at %s, alive %v; a's lease began %s): b's subscriptions consume",
			seenB.Format(time.RFC3339Nano), aliveB, first.attemptedAt.Format(time.RFC3339Nano))
	}
	b.waitLogged(t, "the bus is not delivering to some of this consumer's handlers", 1)

	second := run()
	check("second", second)
	if again, _ := seen("b"); !again.Equal(seenB) {
		t.Errorf("the second take of a left-out handler's reference wrote the liveness again (b's seen_at %s, was %s): nothing had changed on the bus",
			again.Format(time.RFC3339Nano), seenB.Format(time.RFC3339Nano))
	}

	sub.set()
	back := time.Now()
	testwait.Eventually(t, 5*time.Second, "a's liveness recorded once its subscription consumes again", func() (bool, string) {
		at, alive := seen("a")
		return !at.Before(second.attemptedAt) && alive, "seen_at " + at.Format(time.RFC3339Nano)
	})
	t.Logf("a's liveness recorded %s after its subscription consumed again", time.Since(back))
	b.waitLogged(t, "the bus is delivering to every handler of this consumer again", 1)
}
