package consumers_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/consumers"
	"github.com/inlet-dev/inlet/consumers/internal/consumertest"
)

// TestWorkerIDWithNULIsRejectedOrWorks (review helper-137, fixed; this
// describes the code before the fix):
//
// Config.validate checked only WorkerID's length (200 bytes). A WorkerID
// with a NUL byte (or invalid UTF-8: "\xff") was accepted by New and Start,
// but PostgreSQL text refuses it ("invalid byte sequence for encoding UTF8:
// 0x00"), so every statement that carries it failed: ConsumerAlive (a
// warning), ExtendLease, CompleteJobs/complete_jobs, FailJob. The handler
// ran, its success was never recorded ("record attempt outcome failed; the
// lease will expire"), the lease ran out, and since neither worker_id nor a
// consumers row was ever written the reaper gave the attempt back
// uncounted: the job was leased again and the handler ran again, for ever.
// The job never completed, its handler's side effects were repeated without
// end, and nothing told the operator why beyond a log line per attempt.
//
// Now: New refuses such a WorkerID, naming the field (as it does for one
// over 200 bytes); the test also accepts a service that works with it (the
// job completes after one call).
func TestWorkerIDWithNULIsRejectedOrWorks(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var calls atomic.Int32
	cfg := b.config(consumers.Handler{Name: "nulworker", Backoff: noBackoff,
		Func: func(context.Context, *consumers.Event) error { calls.Add(1); return nil }})
	cfg.WorkerID = "replica\x00-1"
	cfg.LeaseExtend = 600 * time.Millisecond
	if _, err := consumers.New(cfg); err != nil {
		t.Logf("New refused the WorkerID: %v", err)
		return // the fix: refused up front
	}
	b.start(t, cfg)
	b.StartStreamer(t, consumertest.StreamerOptions{Lease: 500 * time.Millisecond})
	jobID := b.JobID(t, b.InsertEvent(t, consumertest.EventParams{EventType: "invoice.paid"}), "nulworker")

	deadline := time.Now().Add(8 * time.Second)
	for time.Now().Before(deadline) {
		if b.Job(t, jobID).Status == "completed" {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	j := b.Job(t, jobID)
	if j.Status != "completed" || calls.Load() != 1 {
		t.Fatalf("New accepted WorkerID %q, and after 8s job %d is %s (attempt_count %d) with its handler called %d times: want it refused by New, or the job completed after one call",
			cfg.WorkerID, jobID, j.Status, j.AttemptCount, calls.Load())
	}
}
