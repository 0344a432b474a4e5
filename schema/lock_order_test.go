package schema_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/internal/pgtest"
	"github.com/inlet-dev/inlet/internal/testwait"
	"github.com/inlet-dev/inlet/schema/queries"
)

// The statements that lock several jobs and wait for them lock them in id
// order, as a consumer's batched completion does (consumers sorts each batch
// by job id), so any two of them wait for each other in one order and never
// deadlock. Here job x (the smaller id) is in the default partition and job y
// in the current week's, which a scan of the partitions reaches first.
// Another transaction holds x, as a completion of [x, y] would, while the
// statement runs, then asks for y: locked in scan order, the statement would
// hold y and wait for x, and one of the two would fail with "deadlock
// detected" (seen in TestChaosReplaysDuringFaults, an operator's replay
// during a burst of completions).
func TestMultiJobStatementsLockInIDOrder(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		// status is what x and y are when the statement runs.
		status string
		run    func(ctx context.Context, q *queries.Queries, x, y int64) ([]int64, error)
	}{
		{"replay (AdminRequeueJobs)", "completed", func(ctx context.Context, q *queries.Queries, x, y int64) ([]int64, error) {
			return q.AdminRequeueJobs(ctx, queries.AdminRequeueJobsParams{JobIds: []int64{x, y}})
		}},
		{"leases given back after a failed publish (ReleaseJobs)", "leased", func(ctx context.Context, q *queries.Queries, x, y int64) ([]int64, error) {
			return []int64{x, y}, q.ReleaseJobs(ctx, queries.ReleaseJobsParams{JobIds: []int64{x, y}, LeaseHolder: "streamer-1",
				Attempts: []int32{1, 1}, LeasedAt: []time.Time{lockOrderLeasedAt, lockOrderLeasedAt}})
		}},
		{"leases given back after a failed claim (ReleaseUnseenJobs)", "leased", func(ctx context.Context, q *queries.Queries, x, y int64) ([]int64, error) {
			_, err := q.ReleaseUnseenJobs(ctx, queries.ReleaseUnseenJobsParams{LeaseHolder: "streamer-1", Handlers: []string{"h"},
				LeasedAfter: []time.Time{time.Unix(0, 0)}})
			return []int64{x, y}, err
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			checkLockOrder(t, c.status, c.run)
		})
	}
}

// lockOrderLeasedAt is when checkLockOrder's leased jobs were leased: their
// lease token, with attempt 1.
var lockOrderLeasedAt = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func checkLockOrder(t *testing.T, status string, run func(ctx context.Context, q *queries.Queries, x, y int64) ([]int64, error)) {
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	connect := func() *pgx.Conn {
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close(context.Background()) })
		return conn
	}
	admin, holder, runner := connect(), connect(), connect()
	execAll(t, admin,
		`INSERT INTO webhook_ingress.subscriptions (handler) VALUES ('h')`,
		// x first (the smaller id), in the default partition (40 days old);
		// then y, now.
		`INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, raw_body, signature_verified, received_at)
		 VALUES ('stripe', 'stripe', 'evt_x', '{}', true, now() - interval '40 days')`,
		`INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, raw_body, signature_verified)
		 VALUES ('stripe', 'stripe', 'evt_y', '{}', true)`,
	)
	switch status {
	case "completed":
		execAll(t, admin, `UPDATE webhook_ingress.jobs SET status = 'completed', completed_at = now()`)
	case "leased":
		execAll(t, admin, `UPDATE webhook_ingress.jobs SET status = 'leased', attempt_count = 1, attempted_at = '2026-01-01 00:00:00+00',
			lease_holder_id = 'streamer-1', lease_expires_at = now() + interval '1 hour'`)
	}
	var x, y int64
	if err := admin.QueryRow(ctx, `SELECT
		(SELECT j.id FROM webhook_ingress.jobs j JOIN webhook_ingress.events e ON e.id = j.event_id WHERE e.external_event_id = 'evt_x'),
		(SELECT j.id FROM webhook_ingress.jobs j JOIN webhook_ingress.events e ON e.id = j.event_id WHERE e.external_event_id = 'evt_y')`).Scan(&x, &y); err != nil {
		t.Fatal(err)
	}
	if x >= y {
		t.Fatalf("job ids x %d, y %d: the test needs x < y", x, y)
	}
	var scanFirst int64
	if err := admin.QueryRow(ctx, `SELECT id FROM webhook_ingress.jobs WHERE id = ANY($1) LIMIT 1`, []int64{x, y}).Scan(&scanFirst); err != nil {
		t.Fatal(err)
	}
	if scanFirst != y {
		t.Logf("a scan reaches job %d first, not y (%d): the test proves less than it says", scanFirst, y)
	}

	// The holder locks x, as a completion batch of [x, y] has when it
	// reaches y.
	tx, err := holder.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SET LOCAL deadlock_timeout = '100ms'`); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SELECT FROM webhook_ingress.jobs WHERE id = $1 FOR UPDATE`, x); err != nil {
		t.Fatal(err)
	}
	var runnerPID uint32
	if err := runner.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&runnerPID); err != nil {
		t.Fatal(err)
	}
	type result struct {
		ids []int64
		err error
	}
	ran := make(chan result, 1)
	go func() {
		ids, err := run(ctx, queries.New(runner), x, y)
		ran <- result{ids, err}
	}()
	testwait.Eventually(t, 30*time.Second, "the statement waiting for job x's lock", func() (bool, string) {
		var waiting bool
		err := admin.QueryRow(ctx, `SELECT coalesce(bool_or(wait_event_type = 'Lock'), false) FROM pg_stat_activity WHERE pid = $1`, runnerPID).Scan(&waiting)
		return err == nil && waiting, "not waiting yet"
	})
	// Now the holder asks for y, as the completion's next row; then lets
	// both go.
	_, holdErr := tx.Exec(ctx, `SELECT FROM webhook_ingress.jobs WHERE id = $1 FOR UPDATE`, y)
	_ = tx.Rollback(ctx)
	r := <-ran // before any Fatal: the runner's connection closes at cleanup
	if holdErr != nil {
		t.Fatalf("the holder of job x asking for job y: %v (the statement held y while it waited for x)", holdErr)
	}
	if r.err != nil {
		t.Fatalf("the statement on jobs x and y: %v", r.err)
	}
	var changed []int64
	rows, err := admin.Query(ctx, `SELECT id FROM webhook_ingress.jobs WHERE status = 'pending' ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	if changed, err = pgx.CollectRows(rows, pgx.RowTo[int64]); err != nil {
		t.Fatal(err)
	}
	if slices.Sort(r.ids); !slices.Equal(r.ids, []int64{x, y}) || !slices.Equal(changed, []int64{x, y}) {
		t.Fatalf("the statement returned %v and left %v pending, want both %d and %d", r.ids, changed, x, y)
	}
}
