package schema_test

import (
	"context"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/internal/pgtest"
	"github.com/inlet-dev/inlet/schema"
)

// A forced stop's GiveBackAttempt (029_give_back_attempt) is fenced on the
// attempt's lease token: a stale token, or a lease already finished, changes
// nothing. The current one puts the job back to pending at once, the
// attempt not counted, its lease and consumer cleared.
func TestGiveBackAttemptIsFenced(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	if _, err := pool.Exec(ctx, `INSERT INTO webhook_ingress.subscriptions (handler, provider_pattern) VALUES ('h', 'stripe')`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, schema.Query("InsertEvent"), "stripe", "stripe", "evt_1", "thing.happened", `{}`,
		[]byte(`{}`), true, int16(0), "/webhooks/stripe", "", false, nil, 0); err != nil {
		t.Fatal(err)
	}
	jobs := claimAll(t, pool)
	if len(jobs) != 1 {
		t.Fatalf("leased %d jobs, want 1", len(jobs))
	}
	var j leasedJob
	for _, v := range jobs {
		j = v
	}
	// The consumer extended the lease: the reaper would count this attempt.
	err := asRoleCommit(t, pool, "webhook_worker", func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, schema.Query("ExtendLease"), j.id, j.attempt, time.Minute, j.leasedAt, "c1")
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	type row struct {
		Status                 string
		AttemptCount           int32
		HolderID, WorkerID     *string
		LeaseExpires           *time.Time
		AttemptedAt, UpdatedAt time.Time
		NextAttemptAt          time.Time
	}
	read := func() row {
		t.Helper()
		var r row
		if err := pool.QueryRow(ctx, `SELECT status, attempt_count, lease_holder_id, worker_id, lease_expires_at, attempted_at, updated_at, next_attempt_at
			FROM webhook_ingress.jobs WHERE id = $1`, j.id).Scan(&r.Status, &r.AttemptCount, &r.HolderID, &r.WorkerID, &r.LeaseExpires,
			&r.AttemptedAt, &r.UpdatedAt, &r.NextAttemptAt); err != nil {
			t.Fatal(err)
		}
		return r
	}
	before := read()

	stale := func(mod func(*leasedJob)) leasedJob { s := j; mod(&s); return s }
	for _, c := range []struct {
		what string
		j    leasedJob
	}{
		{"an earlier attempt's", stale(func(s *leasedJob) { s.attempt-- })},
		{"a later attempt's", stale(func(s *leasedJob) { s.attempt++ })},
		{"an earlier lease's (the attempt number repeated after a replay)", stale(func(s *leasedJob) { s.leasedAt = s.leasedAt.Add(-time.Second) })},
		{"another partition's", stale(func(s *leasedJob) { s.eventReceivedAt = s.eventReceivedAt.Add(time.Hour) })},
		{"another job's", stale(func(s *leasedJob) { s.id++ })},
	} {
		var n int64
		err := asRoleCommit(t, pool, "webhook_worker", func(tx pgx.Tx) (err error) { n, err = giveBack(c.j)(tx); return err })
		if err != nil || n != 0 {
			t.Errorf("give back with %s token: given %v, %v; want not given", c.what, n == 1, err)
		}
		if got := read(); !reflect.DeepEqual(got, before) {
			t.Fatalf("give back with %s token changed the job: %s, was %s", c.what, show(got), show(before))
		}
	}
	// A lease already finished is not given back.
	err = asRole(t, pool, "webhook_worker", func(tx pgx.Tx) error {
		if n, err := complete(j)(tx); err != nil || n != 1 {
			t.Fatalf("complete: %d, %v", n, err)
		}
		if n, err := giveBack(j)(tx); err != nil || n != 0 {
			t.Errorf("give back of a completed attempt: given %v, %v; want not given", n == 1, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	var n int64
	if err := asRoleCommit(t, pool, "webhook_worker", func(tx pgx.Tx) (err error) { n, err = giveBack(j)(tx); return err }); err != nil || n != 1 {
		t.Fatalf("give back with the current token: given %v, %v; want given", n == 1, err)
	}
	got := read()
	if got.Status != "pending" || got.AttemptCount != j.attempt-1 || got.HolderID != nil || got.WorkerID != nil || got.LeaseExpires != nil ||
		got.NextAttemptAt.After(got.UpdatedAt) {
		t.Fatalf("given back: %s; want pending now, attempt %d, no lease, no consumer", show(got), j.attempt-1)
	}
	var history int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM webhook_ingress.job_attempts WHERE job_id = $1`, j.id).Scan(&history); err != nil || history != 0 {
		t.Fatalf("%d history rows, %v; want none", history, err)
	}
	// Twice: the lease is no longer there to give back.
	if err := asRoleCommit(t, pool, "webhook_worker", func(tx pgx.Tx) (err error) { n, err = giveBack(j)(tx); return err }); err != nil || n != 0 {
		t.Fatalf("give back twice: given %v, %v; want not given", n == 1, err)
	}
	// The streamer leases it again as the same attempt number.
	again := claimAll(t, pool)
	for _, a := range again {
		if a.id != j.id || a.attempt != j.attempt {
			t.Fatalf("leased again: %+v, want job %d attempt %d", a, j.id, j.attempt)
		}
	}
	if len(again) != 1 {
		t.Fatalf("leased again %d jobs, want 1", len(again))
	}
}

// asRoleCommit runs f as role in a transaction it commits.
func asRoleCommit(t *testing.T, pool interface {
	Begin(context.Context) (pgx.Tx, error)
}, role string, f func(pgx.Tx) error) error {
	t.Helper()
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, "SET LOCAL ROLE "+role); err != nil {
		t.Fatalf("set role %s: %v", role, err)
	}
	if err := f(tx); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// show prints v with its pointers followed.
func show(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
