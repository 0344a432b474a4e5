package schema_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/internal/pgtest"
	"github.com/inlet-dev/inlet/schema"
)

// TestJobPartitionsAreTunedForAHotQueue checks the settings of migrations 008
// and 009: every jobs partition, old or created by create_partitions, has
// fillfactor 80, vacuums and analyzes at 2 % dead rows, unthrottled; and taking a leased job is a HOT update
// (no index entry written), which no index holding updated_at would allow.
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
	// Claimed in its own transaction: in one, now() (and so updated_at)
	// would not change between claim and take.
	claimed, err := pool.Exec(ctx, schema.Query("ClaimJobs"), 10, "streamer-test", time.Minute, 100)
	if err != nil || claimed.RowsAffected() != 1 {
		t.Fatalf("claim: %v, %d rows", err, claimed.RowsAffected())
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	var jobID, eventID int64
	var part uint32
	if err := tx.QueryRow(ctx, `SELECT id, event_id, tableoid FROM webhook_ingress.jobs`).Scan(&jobID, &eventID, &part); err != nil {
		t.Fatal(err)
	}
	hot := func() int64 {
		t.Helper()
		var n int64
		if err := tx.QueryRow(ctx, `SELECT pg_stat_get_xact_tuples_hot_updated($1)`, part).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	before := hot()
	r, err := tx.Query(ctx, schema.Query("TakeJob"), jobID, 1, "audit-log", "worker-test", eventID, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for r.Next() {
		n++
	}
	r.Close()
	if r.Err() != nil || n != 1 {
		t.Fatalf("take: %v, %d rows", r.Err(), n)
	}
	if got := hot() - before; got != 1 {
		t.Fatalf("taking a leased job made %d HOT updates, want 1 (an index holds a column the take changes)", got)
	}
}
