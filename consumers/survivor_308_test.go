package consumers

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/consumers/internal/consumertest"
)

// TestSurvivor308_ExtendedLeaseKeepsASuccessTriedAgain (mutation run,
// helper-308).
// Guarantee (567a40c, 57c18a9): an outcome PostgreSQL cannot take yet
// (unavailable, or read-only after a failover) is tried again until the
// attempt's lease runs out, as this process knows it: the lease's end read
// with the job (fetch) and moved out by each extension while the handler
// runs (extendFor: l.end.push).
// Mutant that no existing test caught (consumers/attempt.go:456, in
// extendFor): "l.end.push(sent.Add(d))" removed, so the lease's end stays
// where the streamer's lease put it however often the handler's lease was
// extended. A handler that runs past its first lease and succeeds while
// the database refuses writes has its success tried once and thrown away
// (its lease "ran out" though the database extended it), and the reaper
// later counts it lease_expired.
// Why missed: TestShortDatabaseRestartKeepsASuccess and
// TestReadOnlyFailoverKeepsASuccess lease their jobs for 60 s, so the
// handler returns well inside the first lease and no extension is needed;
// TestLeaseEndMovesOutOnly tests leaseEnd.push alone, not that an extension
// calls it.
// Here the streamer's lease is 5 s, LeaseExtend 12 s (an extension every
// 4 s); the handler returns after its first lease ran out and the database
// was made read-only, which it stays for 3 s, well inside the extended lease.
func TestSurvivor308_ExtendedLeaseKeepsASuccessTriedAgain(t *testing.T) {
	t.Parallel()
	b := consumertest.New(t)
	logs := keptLogs(t)
	setReadOnly := readOnlySwitch(t, b)

	proxy := newR297Proxy(t, b.Worker.Config())
	pool := proxy.pool(t, b.Worker.Config(), 2*time.Second)

	entered := make(chan struct{}, 1)
	release := make(chan struct{})
	returned := make(chan time.Time, 1)
	r297Service(t, Config{Pool: pool, Subscriber: b.Bus, WorkerID: "s308-extended", LeaseExtend: 12 * time.Second,
		Logger: slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Handlers: []Handler{{Name: "h", MaxAttempts: 3, Timeout: 2 * time.Minute, Backoff: func(int) time.Duration { return 0 },
			Func: func(ctx context.Context, e *Event) error {
				entered <- struct{}{}
				<-release
				returned <- time.Now()
				return nil
			}}}})

	jobID := b.JobID(t, b.InsertEvent(t, consumertest.EventParams{Body: []byte(`{"id":"evt_1"}`)}), "h")
	refs := b.ClaimOnce(t, 5*time.Second)
	if len(refs) != 1 {
		t.Fatalf("claimed %d jobs, want 1", len(refs))
	}
	first := b.Job(t, jobID).LeaseExpiresAt
	if first == nil {
		t.Fatal("the claimed job has no lease")
	}
	if err := b.PublishBatch(refs); err != nil {
		t.Fatal(err)
	}
	select {
	case <-entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the handler never ran")
	}
	// Until the lease was extended (by 3 s or more past the claim's) and
	// the claim's lease has run out.
	for deadline := time.Now().Add(60 * time.Second); ; {
		j := b.Job(t, jobID)
		if j.LeaseExpiresAt != nil && j.LeaseExpiresAt.Sub(*first) >= 3*time.Second && time.Now().After(first.Add(500*time.Millisecond)) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %d's lease was never extended past the claim's (%v, claimed to %v)", jobID, j.LeaseExpiresAt, *first)
		}
		time.Sleep(100 * time.Millisecond)
	}

	// A failover: the consumer reconnects to a server that takes no writes.
	setReadOnly(true)
	proxy.down()
	proxy.up()
	close(release)
	handlerReturned := <-returned
	time.Sleep(3 * time.Second)
	setReadOnly(false)
	proxy.down()
	proxy.up()
	backAt := time.Now()

	var j consumertest.Job
	for deadline := time.Now().Add(20 * time.Second); ; {
		j = b.Job(t, jobID)
		if j.Status == "completed" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s after the database took writes again (%s after the handler returned nil, its lease extended) job %d is %s, attempt_count %d: "+
				"the success was not tried again while its extended lease lasted (service logged %q: %v)",
				time.Since(backAt).Round(100*time.Millisecond), time.Since(handlerReturned).Round(100*time.Millisecond), jobID, j.Status, j.AttemptCount,
				"record attempt outcome failed", strings.Contains(logs.String(), "record attempt outcome failed"))
		}
		time.Sleep(200 * time.Millisecond)
	}
	if j.AttemptCount != 1 {
		t.Errorf("job completed on attempt %d, want 1", j.AttemptCount)
	}
}

// TestSurvivor308_OutcomeTriedPastRecordTimeoutWhileTheLeaseLasts
// (mutation run, helper-308).
// Guarantee (567a40c): while PostgreSQL is unavailable an outcome is tried
// again until its lease runs out, not only for recordTimeout (15 s):
// outcomeContext's deadline is the lease's end when that is later.
// Mutant that no existing test caught (consumers/attempt.go:771, in
// outcomeContext): "end.After(deadline)" made false, so the outcome's
// context ends recordTimeout after the handler returned whatever the lease
// says: a success during an outage of 15 s to a lease's length (a failover
// with a slow promotion) is thrown away and later counted lease_expired.
// Why missed: TestShortDatabaseRestartKeepsASuccess and
// TestReadOnlyFailoverKeepsASuccess keep the database away for 3 s, inside
// recordTimeout, and TestRetryWhileUnavailableLastsTheLease calls
// retryWhileUnavailable with a context of no deadline.
// Here the lease is 60 s and the database refuses writes for 20 s.
func TestSurvivor308_OutcomeTriedPastRecordTimeoutWhileTheLeaseLasts(t *testing.T) {
	t.Parallel()
	b := consumertest.New(t)
	logs := keptLogs(t)
	setReadOnly := readOnlySwitch(t, b)

	proxy := newR297Proxy(t, b.Worker.Config())
	pool := proxy.pool(t, b.Worker.Config(), 2*time.Second)

	entered := make(chan struct{}, 1)
	release := make(chan struct{})
	returned := make(chan time.Time, 1)
	r297Service(t, Config{Pool: pool, Subscriber: b.Bus, WorkerID: "s308-long-outage",
		Logger: slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Handlers: []Handler{{Name: "h", MaxAttempts: 3, Backoff: func(int) time.Duration { return 0 },
			Func: func(ctx context.Context, e *Event) error {
				entered <- struct{}{}
				<-release
				returned <- time.Now()
				return nil
			}}}})

	jobID := b.JobID(t, b.InsertEvent(t, consumertest.EventParams{Body: []byte(`{"id":"evt_1"}`)}), "h")
	refs := b.ClaimOnce(t, 60*time.Second)
	if len(refs) != 1 {
		t.Fatalf("claimed %d jobs, want 1", len(refs))
	}
	if err := b.PublishBatch(refs); err != nil {
		t.Fatal(err)
	}
	select {
	case <-entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the handler never ran")
	}
	setReadOnly(true)
	proxy.down()
	proxy.up()
	close(release)
	handlerReturned := <-returned
	time.Sleep(recordTimeout + 5*time.Second) // longer than recordTimeout, well inside the lease
	setReadOnly(false)
	proxy.down()
	proxy.up()
	backAt := time.Now()

	var j consumertest.Job
	for deadline := time.Now().Add(20 * time.Second); ; {
		j = b.Job(t, jobID)
		if j.Status == "completed" {
			break
		}
		if time.Now().After(deadline) {
			left := "none"
			if j.LeaseExpiresAt != nil {
				left = time.Until(*j.LeaseExpiresAt).Round(time.Second).String()
			}
			t.Fatalf("%s after the database took writes again (%s after the handler returned nil) job %d is %s, attempt_count %d, lease %s from its end: "+
				"the success was given up after recordTimeout though its lease lasted (service logged %q: %v)",
				time.Since(backAt).Round(100*time.Millisecond), time.Since(handlerReturned).Round(100*time.Millisecond), jobID, j.Status, j.AttemptCount, left,
				"record attempt outcome failed", strings.Contains(logs.String(), "record attempt outcome failed"))
		}
		time.Sleep(200 * time.Millisecond)
	}
	if j.AttemptCount != 1 {
		t.Errorf("job completed on attempt %d, want 1", j.AttemptCount)
	}
}
