package retention_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inlet-dev/inlet/retention"
)

// ownerIn opens an owner pool whose sessions run in time zone tz, as every
// session does when the server's timezone (initdb takes the host's), the
// database's or the role's default is not UTC. Inlet's services do not set
// it; the partition functions do (039_partitions_utc).
func ownerIn(t *testing.T, url, tz string) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["timezone"] = tz
	p, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

func onUTCBoundary(p retention.Period, interval string) bool {
	for _, x := range []time.Time{p.Start, p.End} {
		x = x.UTC()
		if x.Hour() != 0 || x.Minute() != 0 || x.Second() != 0 || x.Nanosecond() != 0 {
			return false
		}
	}
	// A month period ends on a 1st; it may start where the last existing
	// (weekly) partition ended, which the first one bridges.
	return interval != "month" || p.End.UTC().Day() == 1
}

// Partitions are "on UTC boundaries" (docs/database.md, Retention), but
// create_partitions added its step to date_trunc(..., 'UTC') as a
// timestamptz, which PostgreSQL does in the session's time zone. West of UTC
// a month step from the 1st 00:00 UTC landed on the 30th/31st, the next
// period then truncated back to that same 1st and got an empty range: CREATE
// TABLE failed, and inlet retention failed before dropping anything, every
// run from then on (a review proved it; fixed by 039_partitions_utc).
func TestMonthlyPartitionsInANonUTCSessionTimeZone(t *testing.T) {
	t.Parallel()
	b := setup(t)
	owner := ownerIn(t, b.url, "America/New_York")
	rep, err := retention.Run(context.Background(), owner, retention.Options{Interval: "month", Ahead: 4, MaxAge: 30 * day})
	if err != nil {
		t.Fatalf("inlet retention with retention.partition_interval month, owner session in America/New_York: %v", err)
	}
	for _, p := range rep.Created {
		if !onUTCBoundary(p, "month") {
			t.Errorf("created period [%s, %s): not on UTC boundaries ending on a month's first day", p.Start.UTC(), p.End.UTC())
		}
	}
}

// The default, weekly, interval: a 7-day step is 7 local days, 167 hours
// across the spring-forward of DST. create_partitions is the function inlet
// retention runs daily and migration 005 runs with the oldest event's time;
// a run whose periods reach a DST change fails the same way (here from a
// start more than a year back, so the periods cross a March of the US).
func TestWeeklyPartitionsAcrossDSTInANonUTCSessionTimeZone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	b.exec(t, `SELECT webhook_ingress.drop_partition(period_start) FROM webhook_ingress.partitions()`)
	owner := ownerIn(t, b.url, "America/New_York")
	rows, err := owner.Query(ctx, `SELECT period_start, period_end FROM webhook_ingress.create_partitions('week', 2, now() - interval '400 days')`)
	if err == nil {
		for rows.Next() {
			var p retention.Period
			if err := rows.Scan(&p.Start, &p.End); err != nil {
				t.Fatal(err)
			}
			if !onUTCBoundary(p, "week") || p.End.Sub(p.Start) != 7*day {
				t.Errorf("created period [%s, %s): not a UTC week", p.Start.UTC(), p.End.UTC())
			}
		}
		rows.Close()
		err = rows.Err()
	}
	if err != nil {
		t.Fatalf("create_partitions('week', 2, a year ago), owner session in America/New_York: %v", err)
	}
}
