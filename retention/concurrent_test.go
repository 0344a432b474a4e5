package retention_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/retention"
)

// atOnce runs f n times at the same moment (each waits for a common start)
// and returns what each returned.
func atOnce[R any](n int, f func() R) []R {
	out := make(chan R, n)
	gate := make(chan struct{})
	for range n {
		go func() {
			<-gate
			out <- f()
		}()
	}
	close(gate)
	rs := make([]R, 0, n)
	for range n {
		rs = append(rs, <-out)
	}
	return rs
}

// Several `inlet migrate` (an init container per replica) or `inlet
// retention` runs may ensure partitions at the same moment: each must
// succeed, and the periods are created once.
func TestEnsurePartitionsConcurrently(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	type result struct {
		created []retention.Period
		err     error
	}
	// 30 days ahead: setup's weeks reach up to 21 days ahead (two weeks
	// past the current one), so 20 created nothing when run early on a
	// Monday (UTC) and the test failed every Monday morning.
	results := atOnce(6, func() result {
		created, err := retention.EnsurePartitions(ctx, b.pool, "day", 30, 10*time.Second)
		return result{created, err}
	})
	seen := map[time.Time]int{}
	for _, r := range results {
		if r.err != nil {
			t.Error(r.err)
		}
		for _, p := range r.created {
			seen[p.Start]++
		}
	}
	for start, n := range seen {
		if n != 1 {
			t.Errorf("period %s reported created %d times", start, n)
		}
	}
	if len(seen) == 0 {
		t.Fatal("no run created a period")
	}
	if n := b.count(t, `SELECT count(*) FROM pg_inherits WHERE inhparent = 'webhook_ingress.events'::regclass`); n < int64(len(seen)) {
		t.Fatalf("%d events partitions, fewer than the %d periods created", n, len(seen))
	}
}

// Retention runs at the same moment (a cron on two hosts) each finish, and
// every expired period is dropped by exactly one of them; none reports a
// period another run dropped.
func TestRetentionRunsConcurrently(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// Weekly partitions from ten weeks ago: those past 30 days are empty,
	// so expired and droppable.
	type result struct {
		rep retention.Report
		err error
	}
	results := atOnce(4, func() result {
		rep, err := retention.Run(context.Background(), b.pool, retention.Options{MaxAge: 30 * day, Interval: "week", Ahead: 2})
		return result{rep, err}
	})
	dropped := map[string]int{}
	for _, r := range results {
		if r.err != nil {
			t.Error(r.err)
			continue
		}
		for _, p := range r.rep.Partitions {
			if p.Verdict != retention.Dropped {
				t.Errorf("partition %s: %s (%s), want dropped by one run and left out by the others", p.Name, p.Verdict, p.Reason)
			}
			dropped[p.Name]++
		}
	}
	if len(dropped) < 4 {
		t.Fatalf("%d expired partitions dropped in all, want the 5 or 6 of ten weeks ago through 30 days: %v", len(dropped), dropped)
	}
	for name, n := range dropped {
		if n != 1 {
			t.Errorf("partition %s reported dropped by %d runs", name, n)
		}
	}
	if n := b.count(t, `SELECT count(*) FROM webhook_ingress.partitions() WHERE period_end <= now() - interval '30 days'`); n != 0 {
		t.Errorf("%d expired partitions left", n)
	}
}

// While another run holds the partition lock past the lock timeout, creating
// partitions fails saying so, and so does Run, whose first step that is; once
// the other run is done, it goes through.
func TestRetentionWaitsForAnotherRunWithinTheLockTimeout(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	other, err := b.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Release()
	tx, err := other.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	// RetentionSerialize, as another run's transaction takes it.
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(x'7061727469746e73'::bigint)`); err != nil {
		t.Fatal(err)
	}
	_, err = retention.EnsurePartitions(ctx, b.pool, "day", 40, 100*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "another inlet retention or inlet migrate") {
		t.Fatalf("EnsurePartitions while another run holds the lock: %v, want a lock timeout naming the other run", err)
	}
	rep, err := retention.Run(ctx, b.pool, retention.Options{MaxAge: 30 * day, Interval: "week", Ahead: 0, LockTimeout: 100 * time.Millisecond})
	if err == nil {
		t.Fatalf("Run while another run holds the lock: %+v, want its partitions-ahead step to time out", rep)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := retention.EnsurePartitions(ctx, b.pool, "day", 40, 100*time.Millisecond); err != nil {
		t.Fatalf("EnsurePartitions once the other run is done: %v", err)
	}
}
