package streamer_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/internal/testwait"
	"github.com/inlet-dev/inlet/streamer"
)

// TestStopIsBoundedWhileTheDatabaseDoesNotAnswer (review helper-311, fixed
// by helper-312): Stop returns within StopTimeout while every statement of
// the streamer on the jobs table waits on a lock (a failover, a stalled
// network, a DBA's lock), with a limited handler claimed apart. Before, the
// loops that claim handlers apart ran their round, whose recount holds the
// lock every claim needs (inFlight.mu), without a deadline, and Stop waited
// for it until the database answered again; and a claim loop Stop had not
// reached yet started another round while it waited for the others.
func TestStopIsBoundedWhileTheDatabaseDoesNotAnswer(t *testing.T) {
	t.Parallel()
	b := setup(t, "billing", "limited")
	ctx := context.Background()
	if _, err := b.admin.Exec(ctx, `INSERT INTO webhook_ingress.handler_limits (handler, max_in_flight) VALUES ('limited', 1000)`); err != nil {
		t.Fatal(err)
	}
	b.insertEvents(t, 10)
	s := b.newStreamer(t, streamer.Config{PollInterval: 50 * time.Millisecond, ReapInterval: 100 * time.Millisecond,
		LeasedRecount: time.Millisecond})
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			s.Stop()
		}
	})
	// Both handlers' jobs leased: the claim loop and the limited loop run
	// (and a failed claim of either would have leases to give back).
	testwait.Eventually(t, 10*time.Second, "every job leased", func() (bool, string) {
		n := b.count(t, `SELECT count(*) FROM webhook_ingress.jobs WHERE status = 'leased'`)
		return n == 20, fmt.Sprintf("%d of 20 leased", n)
	})

	// The database stops answering the streamer.
	locker, err := b.admin.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	tx, err := locker.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	released := false
	release := func() {
		if !released {
			released = true
			_ = tx.Rollback(context.Background())
			locker.Release()
		}
	}
	t.Cleanup(release) // before Stop's cleanup
	if _, err := tx.Exec(ctx, `LOCK TABLE webhook_ingress.jobs IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, 10*time.Second, "a streamer statement waiting on the lock", func() (bool, string) {
		n := b.count(t, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`)
		return n > 0, fmt.Sprintf("%d waiting", n)
	})
	// The loops' rounds begun at different times, some well before Stop.
	time.Sleep(3 * time.Second)

	began := time.Now()
	done := make(chan struct{})
	go func() {
		s.Stop()
		close(done)
	}()
	select {
	case <-done:
		stopped = true
		took := time.Since(began)
		t.Logf("Stop took %s while the database did not answer", took.Round(10*time.Millisecond))
		if took > streamer.StopTimeout {
			t.Errorf("Stop took %s while the database did not answer; StopTimeout is %s", took.Round(10*time.Millisecond), streamer.StopTimeout)
		}
	case <-time.After(streamer.StopTimeout + 10*time.Second):
		release()
		<-done
		stopped = true
		t.Fatalf("Stop did not return within %s while the database did not answer (it returned %s after the lock was released); StopTimeout is %s",
			streamer.StopTimeout+10*time.Second, time.Since(began).Round(10*time.Millisecond), streamer.StopTimeout)
	}
}
