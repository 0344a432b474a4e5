package schema_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inlet-dev/inlet/internal/pgtest"
	"github.com/inlet-dev/inlet/schema"
	"github.com/inlet-dev/inlet/schema/queries"
)

// expireLeases makes limit of h's current leases (the first by id) expire
// now, as if their consumer had died or hung; ran says a consumer extended
// them (worker_id), so the reaper judges that the handler ran.
func expireLeases(t *testing.T, pool *pgxpool.Pool, h string, ran bool, limit int) {
	t.Helper()
	var worker *string
	if ran {
		c := "c-1"
		worker = &c
	}
	tag, err := pool.Exec(context.Background(), `UPDATE webhook_ingress.jobs SET lease_expires_at = now() - interval '1 second', worker_id = $2
		WHERE id IN (SELECT id FROM webhook_ingress.jobs WHERE handler = $1 AND status = 'leased' AND lease_expires_at > now()
			ORDER BY id LIMIT $3)`, h, worker, limit)
	if err != nil {
		t.Fatal(err)
	}
	if tag.RowsAffected() != int64(limit) {
		t.Fatalf("expired %d leases of %s, want %d", tag.RowsAffected(), h, limit)
	}
}

// reapAs runs the streamer's reaper as webhook_streamer.
func reapAs(t *testing.T, pool *pgxpool.Pool) []queries.ReapExpiredLeasesRow {
	t.Helper()
	var rows []queries.ReapExpiredLeasesRow
	if err := asRoleCommit(t, pool, "webhook_streamer", func(tx pgx.Tx) error {
		var err error
		rows, err = queries.New(tx).ReapExpiredLeases(context.Background(), 100)
		return err
	}); err != nil {
		t.Fatalf("reap: %v", err)
	}
	return rows
}

type expiryBreaker struct {
	circuit  string
	failures int
	probeIn  time.Duration // next_probe_at - now(); 0 when NULL
}

func breakerNow(t *testing.T, pool *pgxpool.Pool, h string) expiryBreaker {
	t.Helper()
	var s expiryBreaker
	var secs float64
	if err := pool.QueryRow(context.Background(), `SELECT circuit, consecutive_failures,
			coalesce(extract(epoch FROM next_probe_at - now()), 0)::float8
		FROM webhook_ingress.handler_limits WHERE handler = $1`, h).Scan(&s.circuit, &s.failures, &secs); err != nil {
		t.Fatal(err)
	}
	s.probeIn = time.Duration(secs * float64(time.Second))
	return s
}

func openedIn(rows []queries.ReapExpiredLeasesRow) int {
	n := 0
	for _, r := range rows {
		if r.CircuitOpened {
			n++
		}
	}
	return n
}

// The reaper counts an expired attempt that ran against its handler's
// circuit breaker as HandlerFailed counts a consumer's failure, and a lease
// given back unrun (no consumer that could have run it was alive) not at
// all; an expired half-open probe opens the circuit again; a reset's
// recount (handler_failures_since) counts the expiries too (073, review
// helper-273).
func TestReaperCountsExpiredAttemptsThatRan(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	failures, interval := int32(3), time.Hour
	breakerSetup(t, pool, "exp", 3, queries.UpsertHandlerLimitsParams{BreakerFailures: &failures, BreakerProbeInterval: &interval})

	if got := len(claimLimitedAs(t, pool, "exp")); got != 3 {
		t.Fatalf("closed circuit leased %d of 3 jobs", got)
	}
	// No consumer alive, none extended the leases: an outage, nothing ran.
	expireLeases(t, pool, "exp", false, 3)
	rows := reapAs(t, pool)
	if s := breakerNow(t, pool, "exp"); len(rows) != 3 || s.circuit != "closed" || s.failures != 0 || openedIn(rows) != 0 {
		t.Fatalf("3 leases given back unrun: reaped %d, circuit %s, %d consecutive failures, %d rows say opened; "+
			"want 3 reaped, closed, 0, 0", len(rows), s.circuit, s.failures, openedIn(rows))
	}

	// One attempt ran and expired, two were given back unrun.
	claimLimitedAs(t, pool, "exp")
	expireLeases(t, pool, "exp", true, 1)
	expireLeases(t, pool, "exp", false, 2)
	rows = reapAs(t, pool)
	if s := breakerNow(t, pool, "exp"); len(rows) != 3 || s.circuit != "closed" || s.failures != 1 || openedIn(rows) != 0 {
		t.Fatalf("1 of 3 expired attempts ran: reaped %d, circuit %s, %d consecutive failures, %d rows say opened; "+
			"want 3 reaped, closed, 1, 0", len(rows), s.circuit, s.failures, openedIn(rows))
	}

	// Two more ran and expired: 3 = breaker_failures, the circuit opens.
	claimLimitedAs(t, pool, "exp")
	expireLeases(t, pool, "exp", true, 2)
	rows = reapAs(t, pool)
	s := breakerNow(t, pool, "exp")
	if len(rows) != 2 || s.circuit != "open" || s.failures != 3 || openedIn(rows) != 2 || s.probeIn < 59*time.Minute {
		t.Fatalf("3 expired attempts that ran: reaped %d, circuit %s, %d consecutive failures, next probe in %s, %d rows say opened; "+
			"want 2 reaped, open, 3, ~1h, 2", len(rows), s.circuit, s.failures, s.probeIn, openedIn(rows))
	}

	// The probe is due once the third job (still leased) has ended.
	if _, err := pool.Exec(ctx, `UPDATE webhook_ingress.handler_limits SET next_probe_at = now() - interval '1 second' WHERE handler = 'exp'`); err != nil {
		t.Fatal(err)
	}
	if got := claimLimitedAs(t, pool, "exp"); len(got) != 0 {
		t.Fatalf("open circuit, probe due, a job leased before it opened still runs: %d leased, want none", len(got))
	}
	expireLeases(t, pool, "exp", true, 1)
	reapAs(t, pool) // open already: counted, the probe time kept
	if _, err := pool.Exec(ctx, `UPDATE webhook_ingress.handler_limits SET next_probe_at = now() - interval '1 second' WHERE handler = 'exp'`); err != nil {
		t.Fatal(err)
	}
	probe := claimLimitedAs(t, pool, "exp")
	if len(probe) != 1 || !probe[0].Probe || breakerNow(t, pool, "exp").circuit != "half_open" {
		t.Fatalf("open circuit, probe due, nothing leased: %d leased (%v), circuit %s; want one probe, half_open",
			len(probe), probe, breakerNow(t, pool, "exp").circuit)
	}
	// The probe's consumer hangs in it: its expiry opens the circuit again.
	expireLeases(t, pool, "exp", true, 1)
	rows = reapAs(t, pool)
	s = breakerNow(t, pool, "exp")
	if len(rows) != 1 || s.circuit != "open" || s.failures != 5 || openedIn(rows) != 1 || s.probeIn < 59*time.Minute {
		t.Fatalf("half-open probe expired: reaped %d, circuit %s, %d consecutive failures, next probe in %s, %d rows say opened; "+
			"want 1, open, 5, ~1h, 1", len(rows), s.circuit, s.failures, s.probeIn, openedIn(rows))
	}

	// A reset's recount keeps them: 5 lease_expired attempts since ever.
	var n int
	if err := pool.QueryRow(ctx, `SELECT webhook_ingress.handler_failures_since('exp', '-infinity')`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 5 {
		t.Fatalf("handler_failures_since counts %d failures, want the 5 lease_expired attempts", n)
	}
}

// A handler without a breaker (a rate limit only) keeps its row as it was
// when its attempts expire.
func TestReaperLeavesHandlerWithoutBreakerAlone(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	inFlight := int32(5)
	breakerSetup(t, pool, "nobrk", 2, queries.UpsertHandlerLimitsParams{MaxInFlight: &inFlight})
	claimLimitedAs(t, pool, "nobrk")
	expireLeases(t, pool, "nobrk", true, 2)
	rows := reapAs(t, pool)
	if s := breakerNow(t, pool, "nobrk"); len(rows) != 2 || s.circuit != "closed" || s.failures != 0 || openedIn(rows) != 0 {
		t.Fatalf("handler without a breaker: reaped %d, circuit %s, %d consecutive failures, %d rows say opened; want 2, closed, 0, 0",
			len(rows), s.circuit, s.failures, openedIn(rows))
	}
}

// 073 runs twice (a rewound schema_migrations runs it again).
func TestMigration073RunsTwice(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, conn := migratedTo(t, 73)
	ms, err := schema.Migrations()
	if err != nil {
		t.Fatal(err)
	}
	m := ms[72]
	if m.Version != 73 {
		t.Fatalf("migration 73 is %03d_%s", m.Version, m.Name)
	}
	if err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, m.SQL)
		return err
	}); err != nil {
		t.Fatalf("%03d_%s run a second time: %v", m.Version, m.Name, err)
	}
}
