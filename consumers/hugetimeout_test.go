package consumers_test

import (
	"context"
	"math"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/consumers"
	"github.com/inlet-dev/inlet/consumers/internal/consumertest"
)

// TestHugeTimeoutKeepsItsLease (review helper-137, fixed; this describes the
// code before the fix):
//
// A Handler.Timeout of "no timeout in practice" (math.MaxInt64, the usual Go
// spelling, or anything over ~236 years) passed validate (which only wanted
// it positive), but attempt.go stored the give-up clock as
// handlerDeadline.Store(time.Now().Add(h.Timeout).UnixNano()) (attempt.go,
// the non-transactional branch; runTx did the same in tx.go): a time past
// 2262 has no int64 UnixNano, the value wrapped to a date in the 1700s, and
// extendLease (attempt.go, "a handler still running a LeaseExtend past its
// Timeout") gave the lease up at its very first tick, LeaseExtend/3 into
// the attempt. The handler, running honestly, lost its lease: the reaper
// took the job back (a consumer of the handler is alive, so the attempt
// counts) and dead-lettered it on its last attempt while the handler was
// still running; the handler's success was then fenced out ("lease lost").
// One job, one honest 1.5 s run, ended dead_letter / lease_expired.
// txWaitBound (service.go) overflowed too: (longest + recordTimeout +
// giveBackTimeout + LeaseExtend) * n wrapped negative for a Timeout of 250
// years, and a transactional attempt then failed at once with "no
// connection ... within -744095h".
//
// Now: New refuses a Timeout over 24h, naming the field; and the deadline
// arithmetic saturates (handlerDeadline, txWaitBound, the lease pushed out
// before a transaction above READ COMMITTED) instead of wrapping
// (TestDeadlineArithmeticSaturates). The test also accepts a service that
// keeps the lease for as long as the handler runs (the job completes).
func TestHugeTimeoutKeepsItsLease(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var calls, finished atomic.Int32
	cfg := b.config(consumers.Handler{Name: "notimeout", Backoff: noBackoff, MaxAttempts: 1,
		Timeout: math.MaxInt64,
		Func: func(ctx context.Context, _ *consumers.Event) error {
			calls.Add(1)
			defer finished.Add(1)
			select {
			case <-time.After(1500 * time.Millisecond):
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}})
	cfg.LeaseExtend = 300 * time.Millisecond
	if _, err := consumers.New(cfg); err != nil {
		t.Logf("New refused the Timeout: %v", err)
		return // the fix: refused up front
	}
	b.start(t, cfg)
	b.StartStreamer(t, consumertest.StreamerOptions{Lease: 400 * time.Millisecond})
	jobID := b.JobID(t, b.InsertEvent(t, consumertest.EventParams{EventType: "invoice.paid"}), "notimeout")

	testwaitFor(t, 10*time.Second, func() bool {
		s := b.Job(t, jobID).Status
		return s == "completed" || s == "dead_letter"
	})
	consumertest.WaitFor(t, 5*time.Second, "the handler returned", func() bool { return finished.Load() >= 1 })
	j := b.Job(t, jobID)
	if j.Status != "completed" {
		t.Fatalf("Timeout math.MaxInt64 accepted; job %d ended %s (%s: %s) after one honest 1.5s run (handler called %d times): its lease was given up at the first extension tick",
			jobID, j.Status, deref(j.LastErrorClass), deref(j.LastError), calls.Load())
	}
}

// testwaitFor polls cond every 20ms until it holds or timeout passes.
func testwaitFor(t *testing.T, timeout time.Duration, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(timeout); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if cond() {
			return
		}
	}
}
