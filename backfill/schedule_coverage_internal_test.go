package backfill

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inlet-dev/inlet/internal/database"
	"github.com/inlet-dev/inlet/internal/pgtest"
	"github.com/inlet-dev/inlet/schema"
)

// coverageRun is one reconcile_runs row, its window in hours from until.
type coverageRun struct {
	since, until float64
	running      bool // finished_at NULL: still running, or killed
	failed       bool // error set
	dry          bool
	other        bool   // another source's
	scope        string // what it listed; "" NULL (the whole source, or recorded before 071)
	emptyScope   bool   // scope '' (the whole source, as written since 071)
}

// Where the scheduled round starts, against reconcile_runs rows in a real
// database read as the schedule's role (webhook_ingress_writer): the end of
// the earliest stretch of completed, non-dry coverage that a gap follows,
// whatever runs (manual or scheduled) came later; a gap a later completed
// run covers no longer counts; at most 30 days back and never later than
// until − Window. Before the fix (the latest end of any completed run) the
// cases marked * failed: they answered the end of the last run. Coverage is
// per listing scope (review helper-241): the runs of the entry's scope and
// those of the whole source (scope empty or NULL) count, another scope's
// (another entry's Stripe types) do not; before that fix the cases marked
// † failed.
func TestScheduledSinceCoverage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	admin, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admin.Close)
	pool, err := database.Open(ctx, url, database.Options{Role: schema.IngressRole})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)

	until := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	const day = 24
	cfg := ScheduleConfig{Section: Section{Window: 24 * time.Hour}, DB: pool}
	const a, b = "types=invoice.*", "types=charge.*"
	for i, c := range []struct {
		name  string
		runs  []coverageRun
		want  float64 // hours from until
		scope string  // the entry's; "" the whole source
	}{
		{"no run: the window", nil, -24, ""},
		{"one run ended 48h ago", []coverageRun{{since: -72, until: -48}}, -48, ""},
		{"* a manual run after failed rounds does not hide the gap", []coverageRun{
			{since: -72, until: -48}, {since: -48, until: -21, failed: true}, {since: -3, until: 1}}, -48, ""},
		{"a later run closes the gap", []coverageRun{{since: -72, until: -48}, {since: -3, until: 1}, {since: -50, until: -2}}, -24, ""},
		{"adjacent windows are one stretch", []coverageRun{{since: -72, until: -48}, {since: -48, until: -30}}, -30, ""},
		{"* identical ends", []coverageRun{{since: -72, until: -48}, {since: -60, until: -48}, {since: -3, until: 0}}, -48, ""},
		{"* overlapping, recorded out of order", []coverageRun{{since: -30, until: -10}, {since: -72, until: -48}, {since: -50, until: -40}}, -40, ""},
		{"* a nested window does not end its stretch", []coverageRun{{since: -72, until: -40}, {since: -60, until: -50}, {since: -5, until: 0}}, -40, ""},
		{"* identical manual runs after a gap", []coverageRun{{since: -72, until: -48}, {since: -3, until: 0}, {since: -3, until: 0}}, -48, ""},
		{"* a running run covers nothing", []coverageRun{{since: -72, until: -48}, {since: -48, until: 0, running: true}, {since: -3, until: 0}}, -48, ""},
		{"* a failed run covers nothing", []coverageRun{{since: -72, until: -48}, {since: -48, until: 0, failed: true}, {since: -3, until: 0}}, -48, ""},
		{"* a dry run covers nothing", []coverageRun{{since: -72, until: -48}, {since: -48, until: 0, dry: true}, {since: -3, until: 0}}, -48, ""},
		{"* another source's runs count for it only", []coverageRun{{since: -72, until: -48, other: true}, {since: -72, until: -60}, {since: -50, until: -30}}, -60, ""},
		{"a gap before the earliest run is none", []coverageRun{{since: -100, until: -50}}, -50, ""},
		{"the latest end when no gap follows", []coverageRun{{since: -100, until: -50}, {since: -60, until: -30}}, -30, ""},
		{"at most 30 days back", []coverageRun{{since: -40 * day, until: -35 * day}}, -30 * day, ""},
		{"* failed for longer than 30 days, then a manual run", []coverageRun{{since: -40 * day, until: -35 * day}, {since: -2, until: 0}}, -30 * day, ""},
		{"* a run across the 30-day line, then a gap", []coverageRun{{since: -31 * day, until: -29 * day}, {since: -2, until: 0}}, -29 * day, ""},
		{"older runs and no gap since 30 days ago", []coverageRun{{since: -40 * day, until: -35 * day}, {since: -31 * day, until: 0}}, -24, ""},
		{"† another scope's run does not close the gap", []coverageRun{
			{since: -72, until: -48, scope: a}, {since: -72, until: -48, scope: b}, {since: -48, until: -2, scope: a}}, -48, b},
		{"the scope's own run closes it", []coverageRun{
			{since: -72, until: -48, scope: a}, {since: -72, until: -48, scope: b}, {since: -48, until: -2, scope: a}}, -24, a},
		{"† another scope's runs alone: never compared", []coverageRun{{since: -72, until: -48, scope: a}}, -24, b},
		{"a whole-source run closes every scope's gap", []coverageRun{
			{since: -72, until: -48, scope: b}, {since: -50, until: -2, emptyScope: true}}, -24, b},
		{"a run recorded before 071 (NULL) counts for every scope", []coverageRun{
			{since: -72, until: -48}, {since: -48, until: -30, scope: b}}, -30, b},
		{"† a scoped run does not close the whole source's gap", []coverageRun{
			{since: -72, until: -48}, {since: -48, until: -2, scope: a}}, -48, ""},
		{"* a manual run of the scope after failed rounds does not hide the gap", []coverageRun{
			{since: -72, until: -48, scope: b}, {since: -48, until: -21, failed: true, scope: b}, {since: -3, until: 1, scope: b}}, -48, b},
	} {
		source := fmt.Sprintf("src%d", i)
		for _, r := range c.runs {
			s := source
			if r.other {
				s += "-other"
			}
			at := func(h float64) time.Time { return until.Add(time.Duration(h * float64(time.Hour))) }
			var finished *time.Time
			if !r.running {
				f := at(r.until).Add(time.Minute)
				finished = &f
			}
			var runErr *string
			if r.failed {
				e := "reconcile: page 1: 401 Unauthorized"
				runErr = &e
			}
			var scope *string
			switch {
			case r.scope != "":
				scope = &r.scope
			case r.emptyScope:
				scope = new(string)
			}
			if _, err := admin.Exec(ctx, `INSERT INTO webhook_ingress.reconcile_runs (source, api, window_since, window_until, finished_at, dry_run, error, scope)
				VALUES ($1, 'stripe-events-api', $2, $3, $4, $5, $6, $7)`, s, at(r.since), at(r.until), finished, r.dry, runErr, scope); err != nil {
				t.Fatal(err)
			}
		}
		got, _, err := scheduledSince(ctx, cfg, source, c.scope, until)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if h := got.Sub(until).Hours(); h != c.want {
			t.Errorf("%s: the round starts at until%+gh, want until%+gh", c.name, h, c.want)
		}
	}
}
