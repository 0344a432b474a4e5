package retention_test

import (
	"context"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/retention"
)

// TestSurvivor267_PartitionsReachExactlyAheadPeriodsPastTheCurrent:
// EnsurePartitions(interval, ahead) has partitions for the current period and
// ahead periods past it ("Ahead is how many periods past the current one to
// have partitions for"), on the interval's UTC boundaries, also when the
// interval changes (day to week: the weekly periods continue from the last
// daily one's end and end on week boundaries), and with ahead 0 the current
// period itself.
//
// Mutant: schema/migrations/069_create_partitions_lock_tries.up.sql,
// create_partitions, `stop := date_trunc(p_interval, now(), 'UTC') + step *
// (p_ahead + 1)` made `… + step * p_ahead` (one period short: with ahead 0
// not even the current period, so every insert goes to the default
// partition). Existing tests missed it: TestRetentionKeepsDefaultPartitionAndCreatesAhead
// checks only "at least ten days" past now on a database whose weekly
// partitions already reach two weeks ahead, and the others only that
// partitions are contiguous.
func TestSurvivor267_PartitionsReachExactlyAheadPeriodsPastTheCurrent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	// No partitions at all: what EnsurePartitions creates is all there is.
	b.exec(t, `SELECT webhook_ingress.drop_partition(period_start) FROM webhook_ingress.partitions()`)
	boundary := func(sql string) time.Time {
		t.Helper()
		var at time.Time
		if err := b.pool.QueryRow(ctx, sql).Scan(&at); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		return at
	}
	through := func() time.Time {
		t.Helper()
		var at *time.Time
		if err := b.pool.QueryRow(ctx, `SELECT max(period_end) FROM webhook_ingress.partitions()`).Scan(&at); err != nil {
			t.Fatal(err)
		}
		if at == nil {
			return time.Time{} // no partition at all
		}
		return *at
	}

	created, err := retention.EnsurePartitions(ctx, b.pool, "month", 0, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	wantMonth := boundary(`SELECT date_trunc('month', now(), 'UTC') + interval '1 month'`)
	if len(created) != 1 || !through().Equal(wantMonth) {
		t.Fatalf("month, 0 ahead: created %v, partitioned through %s; want the current month only, through %s", created, through(), wantMonth)
	}
	b.exec(t, `SELECT webhook_ingress.drop_partition(period_start) FROM webhook_ingress.partitions()`)

	if _, err := retention.EnsurePartitions(ctx, b.pool, "day", 3, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	wantDay := boundary(`SELECT date_trunc('day', now(), 'UTC') + interval '4 days'`)
	if got := through(); !got.Equal(wantDay) {
		t.Fatalf("day, 3 ahead: partitioned through %s, want %s (today and three days past it)", got, wantDay)
	}
	// The interval changes to weeks: weekly partitions from the end of the
	// daily ones through two weeks past the current one.
	created, err = retention.EnsurePartitions(ctx, b.pool, "week", 2, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	wantWeek := boundary(`SELECT date_trunc('week', now(), 'UTC') + interval '3 weeks'`)
	if got := through(); !got.Equal(wantWeek) {
		t.Fatalf("week, 2 ahead after days: partitioned through %s, want %s (this week and two past it)", got, wantWeek)
	}
	if len(created) == 0 || !created[0].Start.Equal(wantDay) {
		t.Fatalf("week, 2 ahead after days: created %v, want weekly periods from %s", created, wantDay)
	}
	for i, p := range created {
		if i > 0 && (p.End.Sub(p.Start) != 7*day || p.End.UTC().Weekday() != time.Monday) {
			t.Fatalf("weekly partition %d: %s..%s, want a Monday-to-Monday week", i, p.Start, p.End)
		}
	}
}

// TestSurvivor267_MaxAgeIsMeasuredFromTheDatabasesNow: a period is dropped
// when its end is more than MaxAge before the database's now() (Options.MaxAge),
// not the retention process's clock: a host whose clock runs ahead of the
// database's must not drop a period early.
//
// The database's now() is held back by running Run inside a transaction
// begun seconds earlier (now() is the transaction's start); MaxAge is set so
// that the newest past period's end lies one second after the database's
// cutoff, and at least two seconds before a cutoff read from the Go clock.
//
// Mutant: retention/retention.go Run, `cutoff := now.Add(-opts.MaxAge)` made
// `cutoff := time.Now().Add(-opts.MaxAge)`. Existing tests missed it: their
// MaxAge leaves days between a period's end and the cutoff, and the two
// clocks agree to milliseconds.
func TestSurvivor267_MaxAgeIsMeasuredFromTheDatabasesNow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	tx, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	var dbNow, end time.Time
	if err := tx.QueryRow(ctx, `SELECT now(), max(period_end) FROM webhook_ingress.partitions() WHERE period_end < now() - interval '1 hour'`).Scan(&dbNow, &end); err != nil {
		t.Fatal(err)
	}
	// The Go clock runs at least 3 s ahead of the transaction's now().
	time.Sleep(time.Until(dbNow.Add(3 * time.Second)))
	maxAge := dbNow.Sub(end) + time.Second // the database's cutoff: end - 1 s
	rep, err := retention.Run(ctx, tx, retention.Options{MaxAge: maxAge, Interval: "week", Ahead: 2, LockTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Now.Equal(dbNow) {
		t.Fatalf("control: the report's now is %s, want the transaction's %s", rep.Now, dbNow)
	}
	for _, p := range rep.Partitions {
		if p.End.Equal(end) {
			t.Fatalf("the period ending %s (%s before the database's now, MaxAge %s) was judged (%s); want it left alone: its end is after the database's cutoff",
				end, dbNow.Sub(end), maxAge, p.Verdict)
		}
	}
	var left int
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM webhook_ingress.partitions() WHERE period_end = $1`, end).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left != 1 {
		t.Fatalf("the period ending %s was dropped, though it ended after now() - MaxAge on the database's clock", end)
	}
}

// TestSurvivor267_DryRunListsWhatEnsurePartitionsCreates: a dry run reports
// the periods a run would create (Options.DryRun: "reports what would be
// created and dropped"), all of them: the current period and ahead periods
// past it, as EnsurePartitions then creates them.
//
// Mutant: retention/retention.go wouldCreate, `for i := 0; i <= o.Ahead; i++`
// made `i < o.Ahead` (the dry run leaves out the last period ahead).
// Existing tests missed it: none compares a dry run's Created with what the
// run it stands for creates.
func TestSurvivor267_DryRunListsWhatEnsurePartitionsCreates(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	b.exec(t, `SELECT webhook_ingress.drop_partition(period_start) FROM webhook_ingress.partitions()`)
	for _, o := range []retention.Options{{Interval: "day", Ahead: 3}, {Interval: "week", Ahead: 2}, {Interval: "month", Ahead: 0}} {
		o.DryRun = true
		rep := run(t, b.pool, o)
		created, err := retention.EnsurePartitions(ctx, b.pool, o.Interval, o.Ahead, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if len(created) == 0 || len(rep.Created) != len(created) {
			t.Fatalf("%s, %d ahead: the dry run would create %v; EnsurePartitions created %v", o.Interval, o.Ahead, rep.Created, created)
		}
		for i := range created {
			if !rep.Created[i].Start.Equal(created[i].Start) || !rep.Created[i].End.Equal(created[i].End) {
				t.Fatalf("%s, %d ahead: the dry run would create %v; EnsurePartitions created %v", o.Interval, o.Ahead, rep.Created, created)
			}
		}
		b.exec(t, `SELECT webhook_ingress.drop_partition(period_start) FROM webhook_ingress.partitions()`)
	}
}
