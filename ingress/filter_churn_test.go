package ingress_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inlet-dev/inlet/ingress"
	"github.com/inlet-dev/inlet/internal/database"
	"github.com/inlet-dev/inlet/internal/pgtest"
	"github.com/inlet-dev/inlet/schema"
)

// churnFilter is a distinct, valid filter of about 4 KB (filter.MaxLength
// is 4096), the i-th of a consumer's successive versions.
func churnFilter(i int) string {
	var b strings.Builder
	fmt.Fprintf(&b, `payload.id != "" || payload.v == %d`, i)
	for j := 0; b.Len() < 3900; j++ {
		fmt.Fprintf(&b, ` || payload.f%d.g%d.h == %d`, j, i, j)
	}
	return b.String()
}

// TestFilterChurnKeepsIngressMemoryBounded (review helper-322, fixed).
//
// Defect: ingress keeps every filter expression it has ever compiled, for
// the life of the process: filters.compiled in ingress/filters.go is "by
// expression, across refreshes" and filters.current only ever adds to it,
// never drops an expression no subscription carries any more. A compiled
// ~4 KB CEL filter holds ~100 KB of heap. The filter column is writable by
// the least-privileged roles (014: GRANT UPDATE (filter) ... TO
// webhook_worker, webhook_consumer), so a consumer whose filter text
// changes (a deploy that renders a list of ids into it, a bug, or a
// compromised consumer role updating it in a loop) grows the heap of every
// ingress replica by ~100 KB per version, for ever: ingest, the one service
// that must stay up (DESIGN.md: a 2xx only after commit; an OOM-killed
// ingress answers nobody), is driven out of memory by a role that is
// meant to reach only its own handler's subscriptions. Each change bumps
// filter_version, so the very next insert is refused (IN001), reloads the
// copy and compiles the new expression: the growth is one compiled program
// per change, at the rate the consumer chooses.
// Setup: one filtered subscription; as webhook_worker (a consumer's role),
// its filter is set to 300 successive distinct ~4 KB expressions, each
// followed by one event stored through ingress's PGStore (as ingress
// stores every webhook).
// Expected: ingress's heap holds the compiled filters of the subscriptions
// it routes by (one here), not of every version ever seen: growth of a few
// MB at most over the 300 changes.
// Observed: the live heap grew by ~29 MB (~97 KB per change) and keeps
// growing linearly with the number of changes.
// Fixed: filters.current rebuilds compiled from the rows it read, keeping
// the programs of the expressions still carried (measured after: 0.2 MB
// over the 300 changes).
func TestFilterChurnKeepsIngressMemoryBounded(t *testing.T) {
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	owner, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(owner.Close)
	if _, err := owner.Exec(ctx, `INSERT INTO webhook_ingress.subscriptions (handler, provider_pattern, event_type_pattern, filter)
		VALUES ('churn', 'stripe', '*', $1)`, churnFilter(0)); err != nil {
		t.Fatal(err)
	}
	worker, err := database.Open(ctx, url, database.Options{Role: schema.WorkerRole, MaxConns: 2, AppName: "filter-churn-worker"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(worker.Close)
	pool, err := database.Open(ctx, url, database.Options{Role: schema.IngressRole, MaxConns: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	store := ingress.NewPGStore(pool, nil)

	change := func(i int) {
		t.Helper()
		// The consumer's role may rewrite its filter (014's grant).
		if _, err := worker.Exec(ctx, `UPDATE webhook_ingress.subscriptions SET filter = $1 WHERE handler = 'churn'`, churnFilter(i)); err != nil {
			t.Fatalf("change %d as webhook_worker: %v", i, err)
		}
		if stored, err := store.Insert(ctx, charge(fmt.Sprintf("evt_churn_%d", i), 100)); err != nil || !stored {
			t.Fatalf("insert after change %d: stored=%v err=%v", i, stored, err)
		}
	}
	heap := func() uint64 {
		var m runtime.MemStats
		runtime.GC()
		runtime.GC()
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	// Warm up (pools, CEL's own caches), then measure.
	for i := 1; i <= 20; i++ {
		change(i)
	}
	before := heap()
	const changes = 300
	for i := 21; i < 21+changes; i++ {
		change(i)
	}
	after := heap()
	runtime.KeepAlive(store)

	// Routing still works: every event passed its filter (payload.id != "").
	var jobs int
	if err := owner.QueryRow(ctx, `SELECT count(*) FROM webhook_ingress.jobs WHERE handler = 'churn'`).Scan(&jobs); err != nil {
		t.Fatal(err)
	}
	if jobs != 20+changes {
		t.Fatalf("setup: handler churn has %d jobs, want %d", jobs, 20+changes)
	}
	grew := int64(after) - int64(before)
	t.Logf("live heap before %d B, after %d B: grew %d B over %d filter changes (%d B a change)", before, after, grew, changes, grew/changes)
	if grew > 8<<20 {
		t.Errorf("ingress's live heap grew by %.1f MB over %d changes of one subscription's filter (%.0f KB a change), "+
			"with one filtered subscription to route by: every expression ever compiled is kept (ingress/filters.go filters.compiled)",
			float64(grew)/(1<<20), changes, float64(grew)/changes/1024)
	}
}
