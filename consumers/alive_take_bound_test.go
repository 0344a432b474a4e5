package consumers_test

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/consumers"
	"github.com/inlet-dev/inlet/consumers/internal/consumertest"
)

// lockConsumerRows holds FOR UPDATE the consumers rows of worker in a
// transaction of the admin pool (an operator's long transaction on the
// table, or a statement stuck behind one) until the returned func is called
// (also at cleanup, so that Stop's ConsumerDraining is not blocked).
func lockConsumerRows(t *testing.T, b *testBundle, worker string) (release func()) {
	t.Helper()
	ctx := context.Background()
	tx, err := b.Admin.BeginTx(ctx, pgx.TxOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var n int
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM (SELECT 1 FROM webhook_ingress.consumers
		WHERE worker_id = $1 FOR UPDATE) l`, worker).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Fatalf("no consumers row of %q to lock", worker)
	}
	var once sync.Once
	release = func() { once.Do(func() { _ = tx.Rollback(context.Background()) }) }
	t.Cleanup(release)
	return release
}

// TestSlowLivenessWriteLetsTheLeaseLapseUnderARunningHandler (review helper-215, fixed; this describes the code before the fix)
//
// Defect (8c83fe0): take() decides whether a lease must be extended before
// the handler starts (expires - started < LeaseExtend/2, attempt.go:266)
// and only then calls sayAliveSince, a synchronous write that may block up
// to AliveInterval (its own timeout, alive.go:75) — plus up to another
// AliveInterval waiting on aliveMu behind the alive loop's write, which is
// blocked the same way. The first lease extension comes LeaseExtend/3 after
// the handler starts (extendLease's ticker). The guarantee "remaining lease
// >= LeaseExtend/2 > LeaseExtend/3 at the first extension" that the take's
// check relies on no longer holds: whenever the consumers row is slow
// (row locked by an operator's transaction or another service with the same
// WorkerID, a database failover, a saturated pool) the lease lapses under a
// running handler, the reaper gives it back and another consumer runs the
// job concurrently, and this attempt's outcome is lost. With the defaults
// (streamer lease 60s, LeaseExtend 30s, AliveInterval 5s) a reference that
// waited ~45s in the bus and a stalled liveness write are enough; here the
// same proportions are scaled down (lease 2s, LeaseExtend 3s, AliveInterval
// 1.5s) and the consumers row is locked for the test.
//
// Expected: a handler never runs on a lease that lapses before its first
// extension because of the SDK's own bookkeeping; the job runs once.
// Observed: 0.9 s into the handler (before the 1 s first extension tick)
// the lease has lapsed, the reaper has given the job back (uncounted: the
// liveness write failed) and the streamer leased it again; the handler runs
// a second time, and the first run's outcome is lost ("lease lost").
func TestSlowLivenessWriteLetsTheLeaseLapseUnderARunningHandler(t *testing.T) {
	t.Parallel()
	b := setup(t)
	type seen struct {
		jobID, attempt int
		leasedAt       time.Time // jobs.attempted_at as the handler started
		endLeasedAt    time.Time // as it returned
		endStatus      string
	}
	calls := make(chan seen, 8)
	cfg := b.config(consumers.Handler{Name: "slowalive", Func: func(hctx context.Context, ev *consumers.Event) error {
		ctx := context.Background()
		s := seen{jobID: int(ev.JobID), attempt: ev.Attempt}
		if err := b.Admin.QueryRow(ctx, `SELECT attempted_at FROM webhook_ingress.jobs WHERE id = $1`, ev.JobID).Scan(&s.leasedAt); err != nil {
			t.Errorf("read the job in the handler: %v", err)
		}
		// Shorter than the first extension tick (LeaseExtend/3 = 1s).
		time.Sleep(900 * time.Millisecond)
		if err := b.Admin.QueryRow(ctx, `SELECT coalesce(attempted_at, '-infinity'), status FROM webhook_ingress.jobs WHERE id = $1`,
			ev.JobID).Scan(&s.endLeasedAt, &s.endStatus); err != nil {
			t.Errorf("read the job in the handler: %v", err)
		}
		calls <- s
		return nil
	}})
	cfg.AliveInterval = 1500 * time.Millisecond
	cfg.LeaseExtend = 3 * time.Second
	b.start(t, cfg)
	release := lockConsumerRows(t, b, "test-worker")
	// Past the 250 ms the Start write covers: the take must write again.
	time.Sleep(400 * time.Millisecond)
	b.StartStreamer(t, consumertest.StreamerOptions{Lease: 2 * time.Second})
	jobID := b.JobID(t, b.InsertEvent(t, consumertest.EventParams{}), "slowalive")

	var s seen
	select {
	case s = <-calls:
	case <-time.After(wait):
		release()
		t.Fatalf("handler never called")
	}
	release()
	if s.jobID != int(jobID) {
		t.Fatalf("handler called for job %d, want %d", s.jobID, jobID)
	}
	if !s.endLeasedAt.Equal(s.leasedAt) || s.endStatus != "leased" {
		t.Errorf("job %d: its handler (attempt %d, lease begun %s) was still running, 0.9 s in and before its first lease extension, when the lease was no longer its own (status %s, lease begun %s): it lapsed during the take's blocked liveness write, the reaper gave the job back and it was leased again",
			jobID, s.attempt, s.leasedAt.Format(time.RFC3339Nano), s.endStatus, s.endLeasedAt.Format(time.RFC3339Nano))
	}
	// The consequence: the job runs again while the first run is still going.
	b.WaitJobStatus(t, jobID, "completed", wait)
	n := 1
drain:
	for {
		select {
		case <-calls:
			n++
		default:
			break drain
		}
	}
	if n != 1 {
		t.Errorf("job %d's handler was called %d times, once per lease the reaper gave back; want once", jobID, n)
	}
}

// TestFailingLivenessWriteSerializesEveryTake (review helper-215, fixed; this describes the code before the fix)
//
// Defect (8c83fe0): sayAliveSince's comment promises that "the takes
// waiting on aliveMu share the one write (rechecked under it)". That holds
// only when the write succeeds: seenUntil advances only on success
// (alive.go:100), so when the write fails or times out (consumers row
// locked, database failing over), every take queued on aliveMu runs its own
// write in turn, each waiting its full AliveInterval timeout
// (alive.go:75). Takes of all the service's handlers are serialized behind
// one mutex: N references, even with Concurrency 64, start their handlers
// one AliveInterval apart, and delivery collapses to one attempt per
// AliveInterval (default 5 s: 12 jobs a minute) for as long as the liveness
// row cannot be written — a throughput outage caused purely by liveness
// bookkeeping (before 8c83fe0 a take wrote nothing).
//
// Expected: takes waiting on one liveness write share its outcome, failure
// included; 6 references of one claim start their handlers within about
// one AliveInterval of each other. Observed: their starts are spread over
// ~6 AliveIntervals.
func TestFailingLivenessWriteSerializesEveryTake(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const n = 6
	var mu sync.Mutex
	var starts []time.Time
	cfg := b.config(consumers.Handler{Name: "serial", Func: func(context.Context, *consumers.Event) error {
		mu.Lock()
		starts = append(starts, time.Now())
		mu.Unlock()
		return nil
	}})
	cfg.AliveInterval = 400 * time.Millisecond
	b.start(t, cfg)
	release := lockConsumerRows(t, b, "test-worker")
	time.Sleep(300 * time.Millisecond) // past the Start write's 250 ms

	// n jobs before the streamer starts, so that one claim leases them all
	// and one message carries them.
	for i := range n {
		b.InsertEvent(t, consumertest.EventParams{ExternalID: fmt.Sprintf("evt_serial_%d_%d", time.Now().UnixNano(), i)})
	}
	b.StartStreamer(t, consumertest.StreamerOptions{Lease: time.Minute})

	deadline := time.Now().Add(wait)
	for {
		mu.Lock()
		got := len(starts)
		mu.Unlock()
		if got >= n {
			break
		}
		if time.Now().After(deadline) {
			release()
			t.Fatalf("%d of %d handlers started", got, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
	release()
	mu.Lock()
	ss := append([]time.Time(nil), starts...)
	mu.Unlock()
	sort.Slice(ss, func(i, j int) bool { return ss[i].Before(ss[j]) })
	spread := ss[n-1].Sub(ss[0])
	if spread > 2*cfg.AliveInterval {
		var gaps []string
		for i := 1; i < n; i++ {
			gaps = append(gaps, ss[i].Sub(ss[i-1]).Round(time.Millisecond).String())
		}
		t.Errorf("%d references leased together started their handlers over %s (gaps %v), with AliveInterval %s: each take waited on aliveMu and then ran its own failing liveness write",
			n, spread.Round(time.Millisecond), gaps, cfg.AliveInterval)
	}
}
