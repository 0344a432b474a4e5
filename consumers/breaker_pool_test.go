package consumers_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/consumers"
	"github.com/inlet-dev/inlet/consumers/bus"
	"github.com/inlet-dev/inlet/consumers/internal/consumertest"
	"github.com/inlet-dev/inlet/internal/testwait"
	"github.com/inlet-dev/inlet/schema/queries"
)

// Handler A's failure writes waiting on its busy breaker row never stall
// handler B (guarantee 3 inside one consumer process).
//
// Regression test (review helper-118; fixed: the text describes the
// behaviour before the fix; now A's failure transactions run one at a time
// in a process, breaker.failing, and success resets run off the completion
// writer).
//
// The service keeps two pool connections for its own statements only
// against TRANSACTIONAL handlers (txSlots: "with every connection held,
// another handler's read and the running attempts' own lease extensions would
// wait for one, so one slow transactional handler delayed every other
// handler"). Its own outcome transactions are not bounded at all: every
// failed attempt of a plain handler opens a transaction on the shared pool
// (FailJob, InsertAttempt and, with a circuit breaker, HandlerFailed, which
// locks the handler's handler_limits row) and holds the connection until it
// commits. A handler with a breaker whose failures pile up behind that one
// row (the breaker row is the point of contention for every failure of the
// handler, and is also locked by every streamer's limited claim of it)
// therefore takes up to Concurrency connections - the whole pool - and every
// other handler in the process stops: its reads, completions, lease
// extensions and the service's liveness all wait for a connection (with no
// deadline: the read waits on workCtx).
//
// Here: pool of 8 (the bundle's worker pool), handler "a" (breaker, 16 slots)
// fails every attempt at once; its breaker row is held by another transaction
// (standing in for anything that makes A's failure writes slow: a busy
// limited claim, a slow commit) for as long as the test looks. Handler "b"
// (no breaker, nothing to do with that row) then gets one job.
//
// Expected: b's job completes within a couple of seconds - A's outcome
// writes are A's problem. Before: b's job stayed leased (its read never got
// a connection) for as long as A's row is busy.
func TestOneHandlersBlockedFailureWritesDoNotStallAnother(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	bDone := make(chan int64, 4)
	cfg := b.config(
		consumers.Handler{Name: "a", Provider: "pa", Concurrency: 16, MaxAttempts: 5, BreakerFailures: 1000,
			Backoff: func(int) time.Duration { return time.Hour },
			Func:    func(context.Context, *consumers.Event) error { return errors.New("a is failing") }},
		consumers.Handler{Name: "b", Provider: "pb", Concurrency: 8,
			Func: func(_ context.Context, e *consumers.Event) error { bDone <- e.JobID; return nil }},
	)
	b.start(t, cfg)

	var aIDs []int64
	for range 16 {
		aIDs = append(aIDs, b.JobID(t, b.InsertEvent(t, consumertest.EventParams{Provider: "pa"}), "a"))
	}
	bID := b.JobID(t, b.InsertEvent(t, consumertest.EventParams{Provider: "pb"}), "b")

	// Claim as the streamers do: "a" is limited (its breaker), claimed apart.
	var aRefs []bus.Ref
	if err := consumertest.AsRole(ctx, b.Admin, "webhook_streamer", func(tx pgx.Tx) error {
		q := queries.New(tx)
		if err := q.LockHandlerLimits(ctx, "a"); err != nil {
			return err
		}
		rows, err := q.ClaimLimitedJobs(ctx, queries.ClaimLimitedJobsParams{Handler: "a", BatchSize: 100, LeaseHolder: "test-streamer", LeaseFor: time.Minute})
		for _, j := range rows {
			aRefs = append(aRefs, bus.Ref{JobID: j.ID, EventID: j.EventID, Handler: j.Handler, Provider: j.Provider, EventType: j.EventType,
				Attempt: int(j.AttemptCount), LeaseExpiresAt: j.LeaseExpiresAt, EventReceivedAt: j.EventReceivedAt, LeasedAt: j.AttemptedAt})
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if len(aRefs) != len(aIDs) {
		t.Fatalf("claimed %d of a's %d jobs", len(aRefs), len(aIDs))
	}
	bRefs := b.ClaimOnce(t, time.Minute)
	if len(bRefs) != 1 || bRefs[0].JobID != bID {
		t.Fatalf("claimed %+v for b", bRefs)
	}

	// A's breaker row is busy.
	lockTx, err := b.Admin.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lockTx.Rollback(ctx) }()
	if _, err := lockTx.Exec(ctx, `SELECT 1 FROM webhook_ingress.handler_limits WHERE handler = 'a' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}

	if err := b.PublishBatch(aRefs); err != nil {
		t.Fatal(err)
	}
	// A's failures now wait on the row (before the fix each held a pool
	// connection: the whole pool; now one at a time).
	testwait.Eventually(t, wait, "a's failure transactions waiting on its breaker row", func() (bool, string) {
		var n int
		if err := b.Admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE application_name = 'consumertest-worker' AND wait_event_type = 'Lock'`).Scan(&n); err != nil {
			return false, err.Error()
		}
		return n >= 1, fmt.Sprintf("%d waiting", n)
	})

	if err := b.PublishBatch(bRefs); err != nil {
		t.Fatal(err)
	}
	select {
	case <-bDone:
		b.WaitJobStatus(t, bID, "completed", wait)
	case <-time.After(5 * time.Second):
		j := b.Job(t, bID)
		t.Errorf("handler b's job %d (b has no breaker and nothing to do with a's row) did not run within 5 s while handler a's "+
			"failure writes waited on a's breaker row: status %s; every connection of the pool (8) is held by a's outcome transactions. "+
			"Want: b keeps its pace (its read, completion and lease extensions get a connection)", bID, j.Status)
	}
	_ = lockTx.Rollback(ctx)
}
