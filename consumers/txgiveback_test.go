package consumers_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/consumers"
	"github.com/inlet-dev/inlet/consumers/internal/consumertest"
)

// TestHungTxHandlersOwnJobCyclesForever (review helper-151, fixed; this describes the code before the fix):
// since 7d758d8 a transactional attempt that waits past txWait for a
// transaction slot is given back uncounted (tx.go runTx `case <-wait.C:`
// returns notRun; attempt.go giveBackStarved → GiveBackAttempt, which
// decrements attempt_count). That holds whoever holds the slot, including
// the attempt's OWN handler, hung on an earlier attempt of the SAME job. So:
// attempt 1 of a job hangs ignoring its context and keeps the only slot;
// extendLease gives its lease up, the reaper counts attempt 1
// (lease_expired) and leases attempt 2; attempt 2 waits txWait behind its
// own job's hung attempt 1 and is given back uncounted: the job is pending
// again with attempt_count 1, exactly the state it was in before attempt 2,
// so it is leased as attempt 2 again, waits again, is given back again, for
// as long as the process lives. The job (MaxAttempts 2, its handler run and
// hung) never reaches dead_letter, nor do any of the handler's other jobs:
// "dead_letter after max_attempts" and "every job ends completed or
// dead-lettered" (DESIGN.md) no longer hold, and the only trace is a warn
// line and a given_back counter every ~txWait. Before 7d758d8 attempt 2
// failed (class transaction) and the job was dead-lettered; review
// helper-132's test (txslotwait_test.go) kept MaxAttempts at 1, so the
// stuck job's retry never had to end.
//
// Now: the job of a handler that hung ends: dead_letter once its
// attempts are spent (attempt 2 counted, since the slot is held by its own
// handler past that handler's Timeout), or at the very least not given
// back uncounted for ever.
func TestHungTxHandlersOwnJobCyclesForever(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pool := b.workerPool(t, 3) // one transaction slot
	release := make(chan struct{})
	releaseHung := sync.OnceFunc(func() { close(release) })
	var calls atomic.Int32
	cfg := b.config(consumers.Handler{Name: "hangs", MaxAttempts: 2, Concurrency: 2, Backoff: noBackoff, Timeout: 200 * time.Millisecond,
		TxOptions: pgx.TxOptions{IsoLevel: pgx.ReadCommitted},
		TxFunc: func(context.Context, pgx.Tx, *consumers.Event) error {
			if calls.Add(1) == 1 {
				<-release // the handler's bug: its first run ignores its context
			}
			return nil
		}})
	cfg.Pool = pool
	cfg.LeaseExtend = time.Second
	b.start(t, cfg)
	t.Cleanup(releaseHung) // before the service's Stop
	st := b.StartStreamer(t, consumertest.StreamerOptions{Lease: 2 * time.Second})
	job := b.JobID(t, b.InsertEvent(t, consumertest.EventParams{}), "hangs")

	// txWait here: (0.2 s + 15 s + 5 s + 1 s) × 2 = 42.4 s, after attempt 1
	// was reaped (about 1.2 s + a lease).
	givenBack := func() bool {
		for _, line := range strings.Split(b.logs.String(), "\n") {
			if !strings.Contains(line, "no transaction slot for the handler within the bound") {
				continue
			}
			var rec struct {
				JobID   int64 `json:"job_id"`
				Attempt int   `json:"attempt"`
			}
			if json.Unmarshal([]byte(line), &rec) == nil && rec.JobID == job && rec.Attempt == 2 &&
				strings.Contains(line, "the attempt does not count") {
				return true
			}
		}
		return false
	}
	var j consumertest.Job
	for end := time.Now().Add(75 * time.Second); time.Now().Before(end); time.Sleep(250 * time.Millisecond) {
		j = b.Job(t, job)
		if j.Status == "dead_letter" {
			return // the job ended: fixed
		}
		if givenBack() {
			break
		}
	}
	if !givenBack() {
		t.Fatalf("after 75 s job %d is %s (attempt %d) and its attempt 2 was not given back; handler called %d times",
			job, j.Status, j.AttemptCount, calls.Load())
	}
	// The attempt was given back uncounted: the job is back where it was
	// before attempt 2 and will be leased as attempt 2 again, for ever.
	time.Sleep(time.Second)
	j = b.Job(t, job)
	if j.Status != "dead_letter" {
		t.Fatalf("job %d (max_attempts %d; attempt 1 ran and hung, ignoring its context, and was reaped) had its attempt 2 given back "+
			"UNCOUNTED because the only transaction slot is held by its own hung attempt 1: now %s with attempt_count %d, leased %d time(s) so far "+
			"(attempt 2 again and again, once per txWait), handler called %d time(s); it never reaches dead_letter while the process lives",
			job, j.MaxAttempts, j.Status, j.AttemptCount, len(st.ClaimsOf(job)), calls.Load())
	}
}
