package schema_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inlet-dev/inlet/internal/pgtest"
	"github.com/inlet-dev/inlet/schema/queries"
)

// releaseParams gives back the current leases of jobs ids held by holder,
// each named by its token as the database has it now.
func releaseParams(t *testing.T, conn *pgx.Conn, holder string, ids []int64) queries.ReleaseJobsParams {
	t.Helper()
	p := queries.ReleaseJobsParams{LeaseHolder: holder}
	rows, err := conn.Query(context.Background(), `SELECT id, attempt_count, attempted_at FROM webhook_ingress.jobs
		WHERE id = ANY($1) AND status = 'leased'`, ids)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var id int64
		var attempt int32
		var at time.Time
		if err := rows.Scan(&id, &attempt, &at); err != nil {
			t.Fatal(err)
		}
		p.JobIds, p.Attempts, p.LeasedAt = append(p.JobIds, id), append(p.Attempts, attempt), append(p.LeasedAt, at)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return p
}

// A streamer's give-back of leases whose references it could not publish
// can run late: its lease expired meanwhile, the reaper returned the job
// (its attempt not counted, no consumer being alive) and the same streamer
// leased it again, for the same attempt number, and published that
// reference. The late give-back names the old lease's token and must leave
// the new lease alone; before, fenced on the holder only, it gave back the
// new attempt, whose consumer's outcome was then fenced out.
func TestReleaseJobsGivesBackOnlyItsOwnAttempt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	if _, err := pool.Exec(ctx, `INSERT INTO webhook_ingress.subscriptions (handler) VALUES ('h')`); err != nil {
		t.Fatal(err)
	}
	leakInsertEvent(t, pool, "stripe", "evt_release")
	first := onlyJob(t, claimAll(t, pool))

	// The lease runs out; the reaper returns the job, uncounted.
	if _, err := pool.Exec(ctx, `UPDATE webhook_ingress.jobs SET lease_expires_at = now() - interval '1 second' WHERE id = $1`, first.id); err != nil {
		t.Fatal(err)
	}
	asStreamer(t, pool, func(q *queries.Queries) error {
		_, err := q.ReapExpiredLeases(ctx, 100)
		return err
	})
	second := onlyJob(t, claimAll(t, pool))
	if second.id != first.id || second.attempt != first.attempt || !second.leasedAt.After(first.leasedAt) {
		t.Fatalf("leased again: %+v after %+v; want the same job and attempt, leased later", second, first)
	}

	release := func(j leasedJob) {
		t.Helper()
		asStreamer(t, pool, func(q *queries.Queries) error {
			return q.ReleaseJobs(ctx, queries.ReleaseJobsParams{LeaseHolder: "streamer-1", JobIds: []int64{j.id},
				Attempts: []int32{j.attempt}, LeasedAt: []time.Time{j.leasedAt}})
		})
	}
	state := func() (status string, leasedAt time.Time) {
		t.Helper()
		if err := pool.QueryRow(ctx, `SELECT status, coalesce(attempted_at, 'epoch') FROM webhook_ingress.jobs WHERE id = $1`,
			first.id).Scan(&status, &leasedAt); err != nil {
			t.Fatal(err)
		}
		return status, leasedAt
	}
	release(first)
	if status, at := state(); status != "leased" || !at.Equal(second.leasedAt) {
		t.Fatalf("after the late give-back of the first lease: %s, leased at %v; want the second lease (%v) kept", status, at, second.leasedAt)
	}
	release(second)
	if status, _ := state(); status != "pending" {
		t.Fatalf("after the give-back of the second lease: %s; want pending", status)
	}
}

// onlyJob is the one job jobs holds.
func onlyJob(t *testing.T, jobs map[string]leasedJob) leasedJob {
	t.Helper()
	if len(jobs) != 1 {
		t.Fatalf("%d jobs leased, want 1: %v", len(jobs), jobs)
	}
	for _, j := range jobs {
		return j
	}
	panic("unreachable")
}

// asStreamer runs f as webhook_streamer, committed.
func asStreamer(t *testing.T, pool *pgxpool.Pool, f func(q *queries.Queries) error) {
	t.Helper()
	if err := asRoleCommit(t, pool, "webhook_streamer", func(tx pgx.Tx) error { return f(queries.New(tx)) }); err != nil {
		t.Fatal(err)
	}
}
