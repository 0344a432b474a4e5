package consumers_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/consumers"
	"github.com/inlet-dev/inlet/consumers/bus"
	"github.com/inlet-dev/inlet/consumers/internal/consumertest"
	"github.com/inlet-dev/inlet/internal/testwait"
	"github.com/inlet-dev/inlet/schema/queries"
)

// reviewSlot is a consumer of handler "h" with ONE slot on the in-process
// bus, whose handler holds the first job until release; three jobs are
// claimed under lease and published as each test groups them.
type reviewSlot struct {
	b       *testBundle
	svc     *consumers.Service
	ids     []int64
	byID    map[int64]bus.Ref
	started chan int64
	release chan struct{}
	mu      sync.Mutex
	calls   map[int64]int
}

func newReviewSlot(t *testing.T, leaseExtend, lease time.Duration) *reviewSlot {
	t.Helper()
	w := &reviewSlot{b: setup(t), started: make(chan int64, 16), release: make(chan struct{}), calls: map[int64]int{}}
	var slowJob int64
	cfg := w.b.config(consumers.Handler{Name: "h", Concurrency: 1, MaxAttempts: 1,
		Func: func(ctx context.Context, e *consumers.Event) error {
			w.mu.Lock()
			w.calls[e.JobID]++
			slow := e.JobID == slowJob
			w.mu.Unlock()
			w.started <- e.JobID
			if slow {
				select {
				case <-w.release:
				case <-time.After(wait):
				}
			}
			return nil
		}})
	cfg.LeaseExtend = leaseExtend
	cfg.AliveInterval = 100 * time.Millisecond
	w.svc = w.b.start(t, cfg)
	for range 2 {
		w.ids = append(w.ids, w.b.JobID(t, w.b.InsertEvent(t, consumertest.EventParams{}), "h"))
	}
	w.mu.Lock()
	slowJob = w.ids[0]
	w.mu.Unlock()
	w.byID = map[int64]bus.Ref{}
	for _, r := range w.b.ClaimOnce(t, lease) {
		w.byID[r.JobID] = r
	}
	if len(w.byID) != 2 {
		t.Fatalf("claimed %+v", w.byID)
	}
	t.Cleanup(func() {
		select {
		case <-w.release:
		default:
			close(w.release)
		}
	})
	return w
}

func (w *reviewSlot) publish(t *testing.T, ids ...int64) {
	t.Helper()
	var rs []bus.Ref
	for _, id := range ids {
		rs = append(rs, w.byID[id])
	}
	if err := w.b.PublishBatch(rs); err != nil {
		t.Fatal(err)
	}
}

func (w *reviewSlot) firstStarted(t *testing.T) {
	t.Helper()
	select {
	case id := <-w.started:
		if id != w.ids[0] {
			t.Fatalf("job %d started first, want %d", id, w.ids[0])
		}
	case <-time.After(wait):
		t.Fatal("the first message's attempt never started")
	}
}

func (w *reviewSlot) callsOf(id int64) int {
	time.Sleep(300 * time.Millisecond)
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.calls[id]
}

// reapAfterExpiry waits until job id's lease, as the database has it, has run
// out, and runs the streamer's reaper once.
func (w *reviewSlot) reapAfterExpiry(t *testing.T, id int64) []queries.ReapExpiredLeasesRow {
	t.Helper()
	ctx := context.Background()
	testwait.Eventually(t, wait, fmt.Sprintf("job %d's lease has run out", id), func() (bool, string) {
		var expired *bool
		if err := w.b.Admin.QueryRow(ctx, `SELECT lease_expires_at < now() FROM webhook_ingress.jobs WHERE id = $1`, id).Scan(&expired); err != nil {
			return false, err.Error()
		}
		return expired != nil && *expired, fmt.Sprint(expired)
	})
	return w.reap(t)
}

// reap runs the streamer's reaper once.
func (w *reviewSlot) reap(t *testing.T) []queries.ReapExpiredLeasesRow {
	t.Helper()
	ctx := context.Background()
	var reaped []queries.ReapExpiredLeasesRow
	if err := consumertest.AsRole(ctx, w.b.Admin, "webhook_streamer", func(tx pgx.Tx) error {
		var err error
		reaped, err = queries.New(tx).ReapExpiredLeases(ctx, 100)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return reaped
}

// A graceful Stop gives back the leases it extended of a message's first
// reference still waiting for a slot.
//
// Regression test (review helper-118; fixed: the text describes the
// behaviour before the fix).
// When Stop begins while a message's FIRST reference is still waiting for a
// concurrency slot, the reader Nacks the message and returns ("nothing of it
// started: the bus gives it to another replica"). But while it waited,
// waitForSlot extended its leases, which records this consumer as the
// attempt's worker (ExtendLease sets worker_id). The Nack leaves those
// leases in place: they are not given back, unlike the references at index
// >= 1 of a message, which giveBackUnstarted hands back at Stop's deadline.
// When the lease runs out the reaper sees worker_id set, judges that the
// handler "ran", and counts the attempt (lease_expired) - on the last attempt
// the job is dead-lettered although its handler was never called and the
// consumer stopped cleanly (Stop returned nil). This is the very loss the
// Stop doc says giving leases back prevents ("a forced stop (a deploy) does
// not dead-letter a job on its last attempt") - here with a *graceful* stop.
// On the in-process bus (inlet dev, single process) nothing redelivers the
// Nacked message at all; over NATS a redelivery arriving after the lease ran
// out is stale too.
//
// Expected: the unstarted reference's job is pending again with the attempt
// not counted (attempt_count 0), as for references given back at Stop.
// Before: dead_letter (lease_expired), attempt_count 1, handler never called.
func TestStopGivesBackExtendedLeasesOfANackedMessage(t *testing.T) {
	t.Parallel()
	w := newReviewSlot(t, time.Second, 1500*time.Millisecond)
	ctx := context.Background()
	w.publish(t, w.ids[0])
	w.firstStarted(t)
	w.publish(t, w.ids[1]) // its first (only) reference waits for the slot

	// Its lease is extended while it waits: this consumer is now its worker.
	testwait.Eventually(t, wait, "the waiting reference's lease extended", func() (bool, string) {
		var worker *string
		if err := w.b.Admin.QueryRow(ctx, `SELECT worker_id FROM webhook_ingress.jobs WHERE id = $1`, w.ids[1]).Scan(&worker); err != nil {
			return false, err.Error()
		}
		return worker != nil, deref(worker)
	})

	// A graceful stop: the running attempt finishes within the deadline.
	stopped := make(chan error, 1)
	go func() {
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		stopped <- w.svc.Stop(sctx)
	}()
	time.Sleep(300 * time.Millisecond)
	close(w.release)
	if err := <-stopped; err != nil {
		t.Fatalf("graceful stop: %v", err)
	}
	w.b.WaitJobStatus(t, w.ids[0], "completed", wait)

	var reaped []queries.ReapExpiredLeasesRow
	j := w.b.Job(t, w.ids[1])
	if j.Status == "leased" { // not given back: what the reaper makes of it
		reaped = w.reapAfterExpiry(t, w.ids[1])
		j = w.b.Job(t, w.ids[1])
	}
	if j.Status != "pending" || j.AttemptCount != 0 {
		t.Fatalf("job %d (a reference the stopping consumer never started; its message was Nacked after its lease had been extended): "+
			"after its lease ran out the reaper made it %s (class %s, attempt_count %d); its handler was called %d times. "+
			"Want: its lease given back at Stop - pending, attempt not counted (reaped: %+v)",
			w.ids[1], j.Status, deref(j.LastErrorClass), j.AttemptCount, w.callsOf(w.ids[1]), reaped)
	}
}

// A failed extension of a waiting reference's lease is tried again before
// the lease runs out.
//
// Regression test (review helper-118; fixed: the text describes the
// behaviour before the fix: "waitForSlot records a failed extension as done",
// consumers/service.go:421-425 and extendWaiting service.go:432-450).
//
// While a reference waits for a slot, waitForSlot extends its lease every
// time half of the time left has passed. extendWaiting swallows its error
// (logs a warning), and waitForSlot then sets expires = now+LeaseExtend and
// *extended as if the extension had succeeded. The next try is scheduled
// LeaseExtend/2 later. A single failed extension (a pool momentarily
// exhausted, a network blip, a row lock: anything that takes longer than
// LeaseExtend/3) therefore pushes the next try to about 5/6+1/2 = 4/3 of a
// lease after the last success - past the lease's real expiry. The reaper
// then takes back the lease of a reference that this live consumer holds and
// is about to run: the attempt is counted (the consumer is alive), and on
// the last attempt the job is dead-lettered without its handler being called.
//
// Here: LeaseExtend 3 s, claim lease 3 s; the waiting reference's first
// extension (about 1.5 s in) is held up by a row lock for longer than its
// 1 s timeout, then the lock is released at once. The lease's real expiry is
// the claim's (3 s); the service's next try is ~4 s in. The reaper runs
// right after the real expiry.
//
// Expected: the consumer retries the failed extension while the lease is
// still live, so the job stays leased and later completes.
// Before: the reaper dead-lettered it (lease_expired), handler never called.
func TestFailedWaitingExtensionIsRetriedInTime(t *testing.T) {
	t.Parallel()
	w := newReviewSlot(t, 3*time.Second, 3*time.Second)
	ctx := context.Background()

	// Hold the waiting job's row so that its first extension times out.
	lockTx, err := w.b.Admin.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lockTx.Rollback(ctx) }()
	if _, err := lockTx.Exec(ctx, `SELECT 1 FROM webhook_ingress.jobs WHERE id = $1 FOR UPDATE`, w.ids[1]); err != nil {
		t.Fatal(err)
	}

	w.publish(t, w.ids[0])
	w.firstStarted(t)
	w.publish(t, w.ids[1])

	// The extension waits on the lock, then its LeaseExtend/3 deadline cancels
	// it (silently: extendWaiting logs only when its context did not end).
	blocked := func() (bool, string) {
		var n int
		if err := w.b.Admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND query LIKE '%lease_expires_at = greatest%'`).Scan(&n); err != nil {
			return false, err.Error()
		}
		return n > 0, fmt.Sprintf("%d extensions waiting on the lock", n)
	}
	testwait.Eventually(t, wait, "the waiting reference's extension blocked", blocked)
	testwait.Eventually(t, wait, "the blocked extension given up", func() (bool, string) {
		ok, seen := blocked()
		return !ok, seen
	})
	if err := lockTx.Rollback(ctx); err != nil { // the blip is over
		t.Fatal(err)
	}

	// Past the lease the claim gave (a retried extension has moved it on),
	// the reaper runs.
	time.Sleep(time.Until(w.byID[w.ids[1]].LeaseExpiresAt) + 500*time.Millisecond)
	reaped := w.reap(t)
	j := w.b.Job(t, w.ids[1])
	close(w.release)
	if j.Status != "leased" {
		t.Fatalf("job %d (waiting for a slot in a live consumer; one lease extension failed, the database fine again at once): "+
			"the reaper made it %s (class %s, attempt_count %d) because the service did not try again before the lease ran out; "+
			"its handler was called %d times. Want: extension retried in time, job still leased, then completed (reaped: %+v)",
			w.ids[1], j.Status, deref(j.LastErrorClass), j.AttemptCount, w.callsOf(w.ids[1]), reaped)
	}
	w.b.WaitJobStatus(t, w.ids[1], "completed", wait)
}
