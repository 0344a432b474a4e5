package consumers

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/consumers/internal/consumertest"
)

// TestReadOnlyFailoverKeepsASuccess (review helper-302, fixed).
// Defect: a success that finishes while a failover leaves the consumer
// talking to a read-only server (the demoted primary still named by DNS, a
// multi-host URL without target_session_attrs=read-write, or a database
// that default_transaction_read_only was set on, as managed services do
// when the disk fills: schema.ErrReadOnly names all three) is thrown away
// at the first try: CompleteJobs fails with SQLSTATE 25006, which
// consumers/attempt.go outcomeRetryable (database.IsUnavailable) does not
// count as unavailable, so completeBatch answers at once, Service.complete
// tries alone once more, and the service logs "record attempt outcome
// failed; the lease will expire". The job then sits leased until its lease
// runs out and the reaper counts the success lease_expired (a step toward
// max_attempts and the circuit breaker; dead_letter on the last attempt)
// and runs the handler again: exactly what helper-297's fix promised to
// stop "when PostgreSQL restarts or fails over" (CHANGELOG, docs/pipeline.md).
// Readiness (/readyz) and ingress (503) already treat a read-only server as
// the database being unavailable; only the outcome retry does not.
// Setup: the consumer's pool through a TCP proxy; the streamer's lease 60 s.
// While the handler runs the database is made read-only (ALTER DATABASE …
// SET default_transaction_read_only = on) and the consumer's connections
// are cut, so it reconnects to a server that refuses writes (25006); the
// handler returns nil; 3 s later the database takes writes again (RESET,
// connections cut once more).
// Expected: the success is tried again while the server refuses writes, as
// for a refused connection, and lands once it takes them again: the job is
// completed on attempt 1, its lease ~55 s from its end.
// Observed: the service logged "batched completion failed" and then
// "record attempt outcome failed; the lease will expire" with "cannot
// execute SELECT in a read-only transaction (SQLSTATE 25006)" 0.35 s after
// the handler started (at once after it returned); 20 s after the database
// took writes again the job was still leased (attempt_count 1, lease 37 s
// from its end): the reaper will count the success lease_expired. With
// 25006 added to outcomeRetryable (tried in a scratch copy) this test
// passes in 5.3 s.
// Fixed: outcomeRetryable retries SQLSTATE 25006 too (fenced on the lease
// token; a read-only server wrote nothing).
func TestReadOnlyFailoverKeepsASuccess(t *testing.T) {
	t.Parallel()
	b := consumertest.New(t)
	logs := keptLogs(t)
	setReadOnly := readOnlySwitch(t, b)

	proxy := newR297Proxy(t, b.Worker.Config())
	pool := proxy.pool(t, b.Worker.Config(), 2*time.Second)

	entered := make(chan struct{}, 1)
	release := make(chan struct{})
	returned := make(chan time.Time, 1)
	r297Service(t, Config{Pool: pool, Subscriber: b.Bus, WorkerID: "r302-readonly",
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

	// The failover: the consumer's connections are cut and it reconnects to
	// a server that takes no writes.
	setReadOnly(true)
	proxy.down()
	proxy.up()
	close(release)
	handlerReturned := <-returned
	time.Sleep(3 * time.Second) // the read-only period itself
	setReadOnly(false)
	proxy.down() // sessions opened read-only stay so: reconnect
	proxy.up()
	backAt := time.Now()

	var j consumertest.Job
	deadline := time.Now().Add(20 * time.Second)
	for {
		j = b.Job(t, jobID)
		if j.Status == "completed" {
			break
		}
		if time.Now().After(deadline) {
			text := logs.String()
			t.Fatalf("%s after the database took writes again (%s after the handler returned nil) job %d is %s, attempt_count %d, lease %s from its end: "+
				"the success was not recorded (service logged %q: %v, SQLSTATE 25006: %v); the reaper will count it lease_expired and the handler runs again",
				time.Since(backAt).Round(100*time.Millisecond), time.Since(handlerReturned).Round(100*time.Millisecond), jobID, j.Status, j.AttemptCount,
				time.Until(*j.LeaseExpiresAt).Round(time.Second), "record attempt outcome failed",
				strings.Contains(text, "record attempt outcome failed"), strings.Contains(text, "25006"))
		}
		time.Sleep(200 * time.Millisecond)
	}
	if j.AttemptCount != 1 {
		t.Errorf("job completed on attempt %d, want 1", j.AttemptCount)
	}
}

// keptLogs is a service's log, printed only when the test fails.
func keptLogs(t *testing.T) *consumertest.LockedBuffer {
	t.Helper()
	logs := &consumertest.LockedBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("service logs:\n%s", logs.String())
		}
	})
	return logs
}

// readOnlySwitch makes b's database read-only (default_transaction_read_only,
// as a demoted primary is) or writable again, and writable at the test's
// end. Each switch runs as one read-write transaction: the admin session
// may have been opened while the database was read-only.
func readOnlySwitch(t *testing.T, b *consumertest.Bundle) func(on bool) {
	t.Helper()
	ctx := context.Background()
	var db string
	if err := b.Admin.QueryRow(ctx, `SELECT current_database()`).Scan(&db); err != nil {
		t.Fatal(err)
	}
	setReadOnly := func(on bool) {
		t.Helper()
		stmt := `ALTER DATABASE "` + db + `" RESET default_transaction_read_only`
		if on {
			stmt = `ALTER DATABASE "` + db + `" SET default_transaction_read_only = on`
		}
		if _, err := b.Admin.Exec(ctx, "BEGIN READ WRITE; "+stmt+"; COMMIT"); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { setReadOnly(false) })
	return setReadOnly
}
