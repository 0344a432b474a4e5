package retention_test

import (
	"context"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/retention"
)

// TestCreatingPartitionsAheadDoesNotStallIngest (review helper-192; this
// describes the code before the fix).
//
// Defect: when `inlet retention` (or inlet migrate / inlet dev, which call
// the same create_partitions) has a period to create while any transaction
// holds events (an `inlet audit verify` of a large log: one REPEATABLE READ
// transaction for minutes; a report; pg_dump), every ingest insert stands
// still for the whole retention.lock_timeout (5s by default), queued behind
// retention's ACCESS EXCLUSIVE request. Ingress's store timeout is also 5s
// by default (ingress/section.go StoreTimeout, groupcommit Timeout), so every
// webhook arriving meanwhile is answered 503 outcome-unknown; and the run
// then fails, creating nothing. This happens on the routine path, once per
// period (weekly by default), not only on upgrades.
//
// The drop path was fixed for exactly this (044_drop_partition_lock_order:
// its lock tries last at most 100 ms, "inlet retention neither deadlocks
// with ingest or delivery nor stops them"; TestRetentionDropDoesNotStopIngest)
// but create_partitions (schema/migrations/060_partition_owner.up.sql, "LOCK
// TABLE webhook_ingress.events IN ACCESS EXCLUSIVE MODE", and the CREATE
// TABLE … PARTITION OF jobs / job_attempts after it) waits once, for the
// caller's whole lock_timeout, while holding nothing back from the queue.
//
// Expected: an insert during the wait is delayed at most about as long as
// during a drop (short tries, well under a second), and the creation is
// retried rather than queuing ingest for lock_timeout: once the reader is
// done, within lock_timeout, the run creates the periods.
//
// Before the fix (migration 069_create_partitions_lock_tries) the first
// insert here stood still for 5s (4.999s measured) and the run failed with
// lock_not_available; after it, inserts wait at most one try (~100 ms) and
// the run succeeds.
func TestCreatingPartitionsAheadDoesNotStallIngest(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t) // weekly partitions through two weeks ahead
	w, _ := ingressWriter(t, b.url)
	if err := ingest(ctx, w); err != nil {
		t.Fatal(err)
	}

	// A long reader of the log: what an `inlet audit verify` holds.
	reader, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Rollback(ctx)
	if _, err := reader.Exec(ctx, `SELECT count(*) FROM webhook_ingress.events`); err != nil {
		t.Fatal(err)
	}

	type result struct {
		rep retention.Report
		err error
	}
	ran := make(chan result, 1)
	go func() {
		// The configuration's defaults: four periods ahead (two to create
		// here), lock_timeout 5s.
		rep, err := retention.Run(ctx, b.pool, retention.Options{Interval: "week", Ahead: retention.DefaultAhead})
		ran <- result{rep, err}
	}()
	waitFor(t, b, "retention to wait for events", `SELECT count(*) FROM pg_locks l
		WHERE l.relation = 'webhook_ingress.events'::regclass AND l.mode = 'AccessExclusiveLock' AND NOT l.granted`)

	// Inserts, one after another, for a second of retention's waiting
	// (several of its tries, and the pauses between them); the slowest one.
	var worst time.Duration
	n := 0
	var insertErr error
	for until := time.Now().Add(time.Second); time.Now().Before(until) && insertErr == nil; n++ {
		s := time.Now()
		insertErr = ingest(ctx, w)
		worst = max(worst, time.Since(s))
	}
	// The reader is done well within retention.lock_timeout: the run's next
	// try is granted.
	if err := reader.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-ran
	t.Logf("the slowest of %d inserts while inlet retention waited to create partitions: %s (insert error %v); the run: created %d, %v",
		n, worst, insertErr, len(r.rep.Created), r.err)
	if insertErr != nil {
		t.Errorf("the insert failed: %v", insertErr)
	}
	if limit := 500 * time.Millisecond; worst > limit {
		t.Errorf("ingest stood still for %s while inlet retention waited to create the partitions ahead (retention.lock_timeout %s; ingress answers 503 after its %s store timeout): want at most ~%s, as during a drop",
			worst.Round(time.Millisecond), retention.DefaultLockTimeout, 5*time.Second, limit)
	}
	if r.err != nil {
		t.Errorf("inlet retention, once the reader of events was done within its lock_timeout: %v", r.err)
	} else if len(r.rep.Created) == 0 {
		t.Errorf("inlet retention created no partition ahead once the reader of events was done (through %v)", r.rep.Through)
	}
}
