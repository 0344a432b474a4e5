package schema_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/internal/pgtest"
	"github.com/inlet-dev/inlet/schema"
	"github.com/inlet-dev/inlet/schema/queries"
)

// TestJobPartitionsAreTunedForAHotQueue checks the settings of migrations 008
// and 009: every jobs partition, old or created by create_partitions, has
// fillfactor 80, vacuums and analyzes at 2 % dead rows, unthrottled; and of
// the job protocol (010) that reading a leased attempt writes nothing and its
// completion one row version and no history row.
func TestJobPartitionsAreTunedForAHotQueue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	// Further ahead than migrate goes, so some partitions are new ones.
	var created int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM webhook_ingress.create_partitions('week', 8)`).Scan(&created); err != nil {
		t.Fatal(err)
	}
	if created == 0 {
		t.Fatal("create_partitions('week', 8) created no partition: the new-partition settings go untested")
	}
	rows, err := pool.Query(ctx, `SELECT c.relname, coalesce(array_to_string(c.reloptions, ','), '')
		FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		WHERE i.inhparent = 'webhook_ingress.jobs'::regclass ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	type partition struct{ name, opts string }
	parts, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (partition, error) {
		var p partition
		return p, r.Scan(&p.name, &p.opts)
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(parts) < 4 { // the default and at least this week and two ahead
		t.Fatalf("jobs partitions %v: want the default and three weeks", parts)
	}
	for _, p := range parts {
		for _, want := range []string{"fillfactor=80", "autovacuum_vacuum_scale_factor=0.02", "autovacuum_analyze_scale_factor=0.02", "autovacuum_vacuum_cost_delay=0"} {
			if !strings.Contains(p.opts, want) {
				t.Errorf("jobs partition %s: reloptions %q lack %s", p.name, p.opts, want)
			}
		}
	}

	seed(t, pool)
	// Claimed in its own transaction, as the streamer does.
	var (
		jobID, eventID    int64
		handler           string
		attempt           int32
		partKey, leasedAt time.Time
	)
	claimed, err := queries.New(pool).ClaimJobs(ctx, queries.ClaimJobsParams{
		FullHandlers: []string{}, BatchSize: 10, LeaseHolder: "streamer-test", LeaseFor: time.Minute})
	if err != nil || len(claimed) != 1 {
		t.Fatalf("claim: %v, %d jobs leased, want 1", err, len(claimed))
	}
	j := claimed[0]
	jobID, eventID, handler, attempt, partKey, leasedAt = j.ID, j.EventID, j.Handler, j.AttemptCount, j.EventReceivedAt, j.AttemptedAt

	// The consumer's read of the attempt writes nothing: no transaction id
	// is even assigned.
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	r, err := tx.Query(ctx, schema.Query("FetchJobs"), []int64{jobID}, []int32{attempt}, []string{handler},
		[]int64{eventID}, []time.Time{partKey}, []time.Time{leasedAt})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for r.Next() {
		n++
	}
	r.Close()
	if r.Err() != nil || n != 1 {
		t.Fatalf("read: %v, %d rows", r.Err(), n)
	}
	var xid *int64
	if err := tx.QueryRow(ctx, `SELECT txid_current_if_assigned()`).Scan(&xid); err != nil {
		t.Fatal(err)
	}
	if xid != nil {
		t.Fatalf("reading a leased attempt assigned transaction %d: it wrote something", *xid)
	}

	// The completion updates the job row and writes no history row.
	done, err := tx.Exec(ctx, schema.Query("CompleteJobs"), []int64{jobID}, []int32{attempt}, []time.Time{partKey}, []time.Time{leasedAt}, "worker-test")
	if err != nil || done.RowsAffected() != 1 {
		t.Fatalf("complete: %v, %d rows", err, done.RowsAffected())
	}
	var attempts int64
	var completedID *int64
	if err := tx.QueryRow(ctx, `SELECT (SELECT count(*) FROM webhook_ingress.job_attempts),
		(SELECT completed_attempt_id FROM webhook_ingress.jobs WHERE id = $1)`, jobID).Scan(&attempts, &completedID); err != nil {
		t.Fatal(err)
	}
	if attempts != 0 || completedID == nil {
		t.Fatalf("completing wrote %d history rows and completed_attempt_id %v, want none and an id", attempts, completedID)
	}
}
