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

// A replay (AdminRequeueJobs) locks its jobs in id order, as a consumer's
// batched completion does (consumers sorts each batch by job id), so the two
// wait for each other in one order and never deadlock. Here job x (the
// smaller id) is in the default partition and job y in the current week's,
// which a scan of the partitions reaches first. Another transaction holds x,
// as a completion of [x, y] would, while the replay runs, then asks for y:
// locked in scan order, the replay would hold y and wait for x, and one of
// the two would fail with "deadlock detected" (seen in
// TestChaosReplaysDuringFaults, an operator's replay during a burst of
// completions).
func TestReplayLocksJobsInIDOrder(t *testing.T) {
	t.Parallel()
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
	admin, holder, operator := connect(), connect(), connect()
	execAll(t, admin,
		`INSERT INTO webhook_ingress.subscriptions (handler) VALUES ('h')`,
		// x first (the smaller id), in the default partition (40 days old);
		// then y, now.
		`INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, raw_body, signature_verified, received_at)
		 VALUES ('stripe', 'stripe', 'evt_x', '{}', true, now() - interval '40 days')`,
		`INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, raw_body, signature_verified)
		 VALUES ('stripe', 'stripe', 'evt_y', '{}', true)`,
		`UPDATE webhook_ingress.jobs SET status = 'completed', completed_at = now()`,
	)
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
	var operatorPID uint32
	if err := operator.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&operatorPID); err != nil {
		t.Fatal(err)
	}
	type result struct {
		ids []int64
		err error
	}
	replayed := make(chan result, 1)
	go func() {
		ids, err := queries.New(operator).AdminRequeueJobs(ctx, queries.AdminRequeueJobsParams{JobIds: []int64{x, y}})
		replayed <- result{ids, err}
	}()
	testwait.Eventually(t, 30*time.Second, "the replay waiting for job x's lock", func() (bool, string) {
		var waiting bool
		err := admin.QueryRow(ctx, `SELECT coalesce(bool_or(wait_event_type = 'Lock'), false) FROM pg_stat_activity WHERE pid = $1`, operatorPID).Scan(&waiting)
		return err == nil && waiting, "not waiting yet"
	})
	// Now the holder asks for y, as the completion's next row; then lets
	// both go.
	_, holdErr := tx.Exec(ctx, `SELECT FROM webhook_ingress.jobs WHERE id = $1 FOR UPDATE`, y)
	_ = tx.Rollback(ctx)
	r := <-replayed // before any Fatal: the replay's connection closes at cleanup
	if holdErr != nil {
		t.Fatalf("the holder of job x asking for job y: %v (the replay held y while it waited for x)", holdErr)
	}
	if r.err != nil {
		t.Fatalf("replay of jobs x and y: %v", r.err)
	}
	if slices.Sort(r.ids); !slices.Equal(r.ids, []int64{x, y}) {
		t.Fatalf("replay re-queued %v, want both %d and %d", r.ids, x, y)
	}
}
