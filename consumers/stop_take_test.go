package consumers_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/consumers"
	"github.com/inlet-dev/inlet/consumers/internal/consumertest"
	"github.com/inlet-dev/inlet/internal/testwait"
	"github.com/inlet-dev/inlet/schema/queries"
)

// doc.go promises that "an attempt cut short by Service.Stop's
// deadline gives its lease back instead: its job is pending again at once
// and the attempt does not count, so a forced stop (a deploy) does not
// dead-letter a job on its last attempt. Only if giving it back fails is it
// left to lease expiry". An attempt whose read of its event (take/FetchJobs)
// is still in flight when Stop's deadline passes is cut short too: its lease
// is given back. (Found by a review: attempt returned on the take error and
// kept the lease; when it expired the reaper counted the attempt, another
// consumer of the handler being alive, and dead-lettered a job on its last
// attempt although no handler ever ran.)
//
// Deterministic: the test holds an ACCESS EXCLUSIVE lock on events, so the
// consumer's FetchJobs waits on it until Stop's deadline cancels it.
func TestForcedStopDuringTakeGivesTheLeaseBack(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	ran := make(chan struct{}, 1)
	svc, err := consumers.New(b.config(consumers.Handler{Name: "h", MaxAttempts: 1, Func: func(context.Context, *consumers.Event) error {
		ran <- struct{}{}
		return nil
	}}))
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Start(ctx); err != nil {
		t.Fatal(err)
	}
	jobID := b.JobID(t, b.InsertEvent(t, consumertest.EventParams{}), "h")
	refs := b.ClaimOnce(t, 2*time.Second)
	if len(refs) != 1 {
		t.Fatalf("claimed %+v", refs)
	}

	// Hold the consumer's read of the event.
	lockTx, err := b.Admin.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lockTx.Rollback(ctx) }()
	if _, err := lockTx.Exec(ctx, `LOCK TABLE webhook_ingress.events IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	if err := b.Publish(refs[0]); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, wait, "the consumer's FetchJobs waiting on the events lock", func() (bool, string) {
		var n int
		if err := b.Admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND query ILIKE '%fetch_jobs%'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n > 0, fmt.Sprintf("%d waiting", n)
	})

	sctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if err := svc.Stop(sctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Stop past its deadline: %v", err)
	}
	if err := lockTx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ran:
		t.Fatal("the handler ran; the test wants an attempt cut short before it")
	default:
	}

	j := b.Job(t, jobID)
	leasedAfterStop := j.Status == "leased"

	// Another replica of the handler is alive (a rolling deploy): once the
	// lease runs out the reaper counts the attempt no handler ran.
	if _, err := b.Admin.Exec(ctx, `INSERT INTO webhook_ingress.consumers (handler, worker_id, seen_at, alive_until)
		VALUES ('h', 'other-replica', now(), now() + interval '1 hour')`); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2500 * time.Millisecond)
	err = consumertest.AsRole(ctx, b.Admin, "webhook_streamer", func(tx pgx.Tx) error {
		_, err := queries.New(tx).ReapExpiredLeases(ctx, 10)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	after := b.Job(t, jobID)
	if leasedAfterStop || after.Status == "dead_letter" {
		t.Fatalf("attempt cut short by Stop's deadline while reading its event: right after Stop the job was %+v "+
			"(want pending, attempt 0: lease given back); after the lease expired and the reaper ran it is %q "+
			"(attempts %d, class %s) though the handler never ran", j, after.Status, after.AttemptCount, deref(after.LastErrorClass))
	}
}
