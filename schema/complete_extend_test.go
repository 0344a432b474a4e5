package schema_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inlet-dev/inlet/internal/pgtest"
	"github.com/inlet-dev/inlet/internal/testwait"
	"github.com/inlet-dev/inlet/schema"
	"github.com/inlet-dev/inlet/schema/queries"
)

// A lease extension of the same attempt that commits while CompleteJobs
// waits for the job's row (the consumer's extension loop was stopped as the
// handler returned, but its last ExtendLease was already on the server) does
// not change the lease token: the completion must still land. complete_jobs
// found the row by its tuple id, which the extension's update moved, so the
// completion missed, the consumer took its lease for lost, and the job ran
// again after the lease expired (on its last attempt: a dead letter for a
// handler that succeeded).
func TestCompletionLandsThroughAConcurrentLeaseExtension(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	if _, err := pool.Exec(ctx, `INSERT INTO webhook_ingress.subscriptions (handler, provider_pattern) VALUES ('h', 'stripe')`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, raw_body, signature_verified)
		VALUES ('stripe', 'stripe', 'evt_extend', '{}', true)`); err != nil {
		t.Fatal(err)
	}
	claimed, err := queries.New(pool).ClaimJobs(ctx, queries.ClaimJobsParams{FullHandlers: []string{}, BatchSize: 10,
		LeaseHolder: "s1", LeaseFor: time.Minute})
	if err != nil || len(claimed) != 1 {
		t.Fatalf("claim: %v, %d jobs leased, want 1", err, len(claimed))
	}
	j := claimed[0]

	// The extension, holding the row until the completion waits for it.
	ext, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer ext.Rollback(ctx)
	var until time.Time
	if err := ext.QueryRow(ctx, schema.Query("ExtendLease"), j.ID, j.AttemptCount, 2*time.Minute, j.AttemptedAt, "c1").Scan(&until); err != nil {
		t.Fatalf("extend: %v", err)
	}
	completeConn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer completeConn.Release()
	var pid int
	if err := completeConn.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	done := make(chan int64, 1)
	go func() {
		tag, err := completeConn.Exec(ctx, schema.Query("CompleteJobs"), []int64{j.ID}, []int32{j.AttemptCount},
			[]time.Time{j.EventReceivedAt}, []time.Time{j.AttemptedAt}, "c1")
		if err != nil {
			t.Errorf("complete: %v", err)
		}
		done <- tag.RowsAffected()
	}()
	waitForLock(t, pool, pid)
	if err := ext.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if n := <-done; n != 1 {
		var status string
		_ = pool.QueryRow(ctx, `SELECT status FROM webhook_ingress.jobs WHERE id = $1`, j.ID).Scan(&status)
		t.Fatalf("the completion of attempt %d, whose lease an extension of the same attempt had just pushed out, completed %d jobs, want 1 (job %s)",
			j.AttemptCount, n, status)
	}
}

// waitForLock waits until backend pid waits for a lock.
func waitForLock(t *testing.T, pool *pgxpool.Pool, pid int) {
	t.Helper()
	testwait.Eventually(t, 10*time.Second, "the completion waiting for the row", func() (bool, string) {
		var wait string
		err := pool.QueryRow(context.Background(), `SELECT coalesce(wait_event_type, '') FROM pg_stat_activity WHERE pid = $1`, pid).Scan(&wait)
		return err == nil && wait == "Lock", "wait_event_type " + wait
	})
}
