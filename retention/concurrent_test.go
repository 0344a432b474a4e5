package retention_test

import (
	"context"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/retention"
)

// Several `inlet migrate` (an init container per replica) or `inlet
// retention` runs may ensure partitions at the same moment: each must
// succeed, and the periods are created once.
func TestEnsurePartitionsConcurrently(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	const runs = 6
	type result struct {
		created []retention.Period
		err     error
	}
	results := make(chan result, runs)
	gate := make(chan struct{})
	for range runs {
		go func() {
			<-gate
			created, err := retention.EnsurePartitions(ctx, b.pool, "day", 20, 10*time.Second)
			results <- result{created, err}
		}()
	}
	close(gate)
	seen := map[time.Time]int{}
	for range runs {
		r := <-results
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
	const runs = 4
	type result struct {
		rep retention.Report
		err error
	}
	results := make(chan result, runs)
	gate := make(chan struct{})
	for range runs {
		go func() {
			<-gate
			rep, err := retention.Run(context.Background(), b.pool, retention.Options{MaxAge: 30 * day, Interval: "week", Ahead: 2})
			results <- result{rep, err}
		}()
	}
	close(gate)
	dropped := map[string]int{}
	for range runs {
		r := <-results
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
