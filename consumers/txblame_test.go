package consumers_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/consumers"
	"github.com/inlet-dev/inlet/consumers/internal/consumertest"
)

// TestHungHandlerDeadLettersHealthyTxHandlersJobs (review helper-158, fixed; this describes the code before the fix):
// since 1fcbe81, runTx (consumers/tx.go, `case <-wait.C:`) decides
// whose fault a wait past txWait is by asking only whether ANY attempt of
// the waiting handler holds a transaction slot AT THAT INSTANT
// (s.holdsTx(h.Name)). txWaitBound (service.go) assumes all `slots` places
// cycle; when a hung handler B holds all but one of them, an honest queue of
// handler A's attempts on the one place left outlasts the bound, and when
// the timer fires one of A's own, perfectly honest, attempts is of course
// holding that place. So A's queued attempt FAILS, class transaction, with
// the text "its own transactions held them longer than their Timeouts and
// commits allow (a handler that ignores its context, …)" — false: no A call
// went past its Timeout — and on its last attempt A's job is dead-lettered
// with its handler never run. That is exactly the regression review
// helper-137 fixed (TestTxWaitDeadLettersAnotherHandlersUnrunJob: "handler
// A failing never retries handler B"; an attempt counted but never run),
// come back whenever the pool has more than one transaction slot.
//
// Here: pool of 18 (16 slots). B (Concurrency 15) hangs ignoring its
// context, holding 15 slots. A (Concurrency 17, Timeout 4.2 s, MaxAttempts 1)
// returns after 4 s, always within its Timeout. txWait = ((15+17-1)/16 + 1) ×
// (4.2 + 15 + 5 + 1) s = 50.4 s; A's 17 attempts share one slot, the last
// ones wait up to 16 × 4 s = 64 s.
//
// Now: every A job completes (given back at the bound, as for any wait
// behind another handler's hang, then run). Got: A jobs dead_letter, class
// transaction, their handler never called.
func TestHungHandlerDeadLettersHealthyTxHandlersJobs(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pool := b.workerPool(t, 18) // 16 transaction slots
	release := make(chan struct{})
	releaseB := sync.OnceFunc(func() { close(release) })
	var bEntered, aCalls atomic.Int32
	var longest atomic.Int64
	const (
		hung  = 15
		aJobs = 17
	)
	cfg := b.config(
		consumers.Handler{Name: "rv158b", EventType: "b.*", Concurrency: hung, MaxAttempts: 1, Timeout: 200 * time.Millisecond, Backoff: noBackoff,
			TxOptions: pgx.TxOptions{IsoLevel: pgx.ReadCommitted},
			TxFunc: func(context.Context, pgx.Tx, *consumers.Event) error {
				bEntered.Add(1)
				<-release // handler B's bug: it ignores its context
				return nil
			}},
		consumers.Handler{Name: "rv158a", EventType: "a.*", Concurrency: aJobs, MaxAttempts: 1, Timeout: 4200 * time.Millisecond, Backoff: noBackoff,
			TxOptions: pgx.TxOptions{IsoLevel: pgx.ReadCommitted},
			TxFunc: func(ctx context.Context, _ pgx.Tx, _ *consumers.Event) error {
				aCalls.Add(1)
				start := time.Now()
				defer func() {
					d := int64(time.Since(start))
					for {
						old := longest.Load()
						if d <= old || longest.CompareAndSwap(old, d) {
							return
						}
					}
				}()
				select { // honest and slow: well within its Timeout
				case <-time.After(4 * time.Second):
					return nil
				case <-ctx.Done():
					return ctx.Err()
				}
			}},
	)
	cfg.Pool = pool
	cfg.LeaseExtend = time.Second
	b.start(t, cfg)
	t.Cleanup(releaseB) // before Stop (cleanups run last first)
	b.StartStreamer(t, consumertest.StreamerOptions{Lease: 2 * time.Second})

	for i := 0; i < hung; i++ {
		b.InsertEvent(t, consumertest.EventParams{EventType: "b.stuck"})
	}
	consumertest.WaitFor(t, 20*time.Second, "handler B holds 15 transaction slots", func() bool { return bEntered.Load() >= hung })
	var jobs []int64
	for i := 0; i < aJobs; i++ {
		jobs = append(jobs, b.JobID(t, b.InsertEvent(t, consumertest.EventParams{EventType: "a.fine"}), "rv158a"))
	}

	deadline := time.Now().Add(150 * time.Second)
	for time.Now().Before(deadline) {
		done := 0
		for _, id := range jobs {
			j := b.Job(t, id)
			switch j.Status {
			case "completed":
				done++
			case "dead_letter", "failed":
				var why string
				for _, a := range b.Attempts(t, id) {
					why += fmt.Sprintf(" [%s class %s: %s]", a.Outcome, deref(a.ErrorClass), deref(a.Error))
				}
				t.Fatalf("healthy handler A's job %d is %s (attempt %d): its queued attempt was blamed on A because one of A's honest attempts "+
					"held the one slot the hung handler B left; A called %d time(s), its longest call %s (Timeout 4.2 s); history:%s",
					id, j.Status, j.AttemptCount, aCalls.Load(), time.Duration(longest.Load()), why)
			}
		}
		if done == len(jobs) {
			return
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Fatalf("A's jobs did not all complete in 150 s (A called %d times)", aCalls.Load())
}
