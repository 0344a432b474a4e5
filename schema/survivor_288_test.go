package schema_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/internal/pgtest"
	"github.com/inlet-dev/inlet/schema/queries"
)

// TestSurvivor288_ExpiredHalfOpenProbeReopensBelowTheThreshold: an expired
// half-open probe opens its circuit again whatever its consecutive failures
// (073 count_expired_attempts, as HandlerFailed: a failed probe reopens).
// Mutant (helper-288): schema/migrations/073_breaker_counts_expiry.up.sql:93,
// `CASE WHEN l.circuit = 'half_open' OR l.consecutive_failures + n.n >= ...`
// with the half_open clause dropped: the circuit stays half_open with its
// probe lost. Existing tests missed it: TestReaperCountsExpiredAttemptsThatRan
// expires its probe with consecutive_failures already past breaker_failures,
// so the threshold alone reopens it. Here a consumer raised breaker_failures
// (3 -> 10) while the circuit was open (UpsertHandlerLimits keeps the circuit
// and the count), so the probe's expiry leaves 4 failures of 10.
func TestSurvivor288_ExpiredHalfOpenProbeReopensBelowTheThreshold(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	failures, interval := int32(3), time.Hour
	breakerSetup(t, pool, "exp288", 3, queries.UpsertHandlerLimitsParams{BreakerFailures: &failures, BreakerProbeInterval: &interval})

	if got := len(claimLimitedAs(t, pool, "exp288")); got != 3 {
		t.Fatalf("closed circuit leased %d of 3 jobs", got)
	}
	expireLeases(t, pool, "exp288", true, 3)
	reapAs(t, pool)
	if s := breakerNow(t, pool, "exp288"); s.circuit != "open" || s.failures != 3 {
		t.Fatalf("3 expired attempts that ran: circuit %s, %d failures; want open, 3", s.circuit, s.failures)
	}

	// The consumer registers the handler again with a higher threshold: the
	// open circuit and its 3 failures are kept.
	more := int32(10)
	if _, err := queries.New(pool).UpsertHandlerLimits(ctx, queries.UpsertHandlerLimitsParams{Handler: "exp288",
		BreakerFailures: &more, BreakerProbeInterval: &interval}); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE webhook_ingress.handler_limits SET next_probe_at = now() - interval '1 second' WHERE handler = 'exp288'`); err != nil {
		t.Fatal(err)
	}
	probe := claimLimitedAs(t, pool, "exp288")
	if s := breakerNow(t, pool, "exp288"); len(probe) != 1 || !probe[0].Probe || s.circuit != "half_open" || s.failures != 3 {
		t.Fatalf("probe due: %d leased, circuit %s, %d failures; want one probe, half_open, 3", len(probe), s.circuit, s.failures)
	}

	// The probe's consumer hangs in it: 4 failures of 10, but a failed probe
	// opens the circuit again.
	expireLeases(t, pool, "exp288", true, 1)
	rows := reapAs(t, pool)
	s := breakerNow(t, pool, "exp288")
	if len(rows) != 1 || s.circuit != "open" || s.failures != 4 || openedIn(rows) != 1 || s.probeIn < 59*time.Minute {
		t.Fatalf("half-open probe expired below the threshold: reaped %d, circuit %s, %d failures, next probe in %s, %d rows say opened; "+
			"want 1, open, 4, ~1h, 1", len(rows), s.circuit, s.failures, s.probeIn, openedIn(rows))
	}
}

// TestSurvivor288_DeferredJobIsDueItsDelayAfterNow: DeferJobs makes a job
// due delays[i] after the database's now() at the deferral (jobs.sql
// DeferJobs: "due again delays[i] after now()"), however long ago it was
// leased.
// Mutant (helper-288): schema/queries/jobs.sql:219 (and jobs.sql.go:570)
// `now() + t.delay` -> `t.leased_at + t.delay`: the delay counted from the
// lease, on the database's clock too, so the clock-skew test passes. Existing
// tests missed it: every deferral in them follows its claim at once, where
// leased_at and now() are the same instant. A reference deferred later in its
// lease came due that much sooner (at once when leased longer ago than its
// delay): the slow role's backlog leased and given back again.
func TestSurvivor288_DeferredJobIsDueItsDelayAfterNow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	breakerSetup(t, pool, "defer288", 1, queries.UpsertHandlerLimitsParams{})
	rows := claimLimitedAs(t, pool, "defer288")
	if len(rows) != 1 {
		t.Fatalf("leased %d of 1 job", len(rows))
	}
	// The lease began 10 minutes ago (a lease of an hour): the reference was
	// held since, and is deferred now.
	var leasedAt time.Time
	if err := pool.QueryRow(ctx, `UPDATE webhook_ingress.jobs SET attempted_at = attempted_at - interval '10 minutes',
			lease_expires_at = now() + interval '50 minutes' WHERE id = $1 RETURNING attempted_at`, rows[0].ID).Scan(&leasedAt); err != nil {
		t.Fatal(err)
	}
	if err := asRoleCommit(t, pool, "webhook_streamer", func(tx pgx.Tx) error {
		return queries.New(tx).DeferJobs(ctx, queries.DeferJobsParams{JobIds: []int64{rows[0].ID},
			Attempts: []int32{rows[0].AttemptCount}, LeasedAt: []time.Time{leasedAt}, Delays: []time.Duration{time.Minute},
			LeaseHolder: "s"})
	}); err != nil {
		t.Fatalf("defer: %v", err)
	}
	var status string
	var dueIn float64
	if err := pool.QueryRow(ctx, `SELECT status, extract(epoch FROM next_attempt_at - now())::float8 FROM webhook_ingress.jobs WHERE id = $1`,
		rows[0].ID).Scan(&status, &dueIn); err != nil {
		t.Fatal(err)
	}
	// now() is the deferral's transaction's or later: at most a minute ahead.
	if status != "pending" || dueIn < 30 || dueIn > 61 {
		t.Fatalf("a job leased 10 minutes ago deferred by 1 minute: %s, due in %.1f s; want pending, due about 60 s after the deferral", status, dueIn)
	}
}
