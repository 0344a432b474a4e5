package ingress_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/inlet-dev/inlet/ingress"
	"github.com/inlet-dev/inlet/internal/database"
	"github.com/inlet-dev/inlet/internal/pgtest"
	"github.com/inlet-dev/inlet/internal/testwait"
	"github.com/inlet-dev/inlet/schema"
)

type countingHinter struct{ n atomic.Int64 }

func (h *countingHinter) Hint() { h.n.Add(1) }

func groupStore(t *testing.T, cfg ingress.GroupConfig) (*ingress.GroupStore, *pgxpool.Pool, *countingHinter) {
	t.Helper()
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	admin, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admin.Close)
	pool, err := database.Open(ctx, url, database.Options{Role: schema.IngressRole, MaxConns: 8})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	h := &countingHinter{}
	g := ingress.NewGroupStore(pool, h, cfg)
	t.Cleanup(g.Close)
	return g, admin, h
}

func event(id string) *ingress.Event {
	return &ingress.Event{Provider: "stripe", Scheme: "stripe", ExternalID: id, EventType: "invoice.paid",
		Headers: map[string][]string{"Stripe-Signature": {"t=1,v1=x"}}, RequestURI: "/webhooks/stripe",
		RawBody: []byte(`{"id":"` + id + `"}`), Verified: true}
}

// 400 concurrent inserts of 100 distinct keys, each sent four times: exactly
// one answer per key says stored, the rest duplicate, 100 rows; the
// transactions were shared (fewer commits than inserts).
func TestGroupCommitAnswersEachRequest(t *testing.T) {
	t.Parallel()
	g, admin, hints := groupStore(t, ingress.GroupConfig{MaxBatch: 64, MaxWait: 2 * time.Millisecond, Committers: 2})
	ctx := context.Background()
	const keys, copies = 100, 4
	stored := make([]atomic.Int64, keys)
	var wg sync.WaitGroup
	for c := range copies {
		for k := range keys {
			wg.Go(func() {
				s, err := g.Insert(ctx, event(fmt.Sprintf("evt_g_%d", k)))
				if err != nil {
					t.Errorf("insert %d (copy %d): %v", k, c, err)
				}
				if s {
					stored[k].Add(1)
				}
			})
		}
	}
	wg.Wait()
	for k := range keys {
		if n := stored[k].Load(); n != 1 {
			t.Fatalf("key %d: %d answers said stored, want 1", k, n)
		}
	}
	var rows int
	if err := admin.QueryRow(ctx, `SELECT count(*) FROM webhook_ingress.events`).Scan(&rows); err != nil || rows != keys {
		t.Fatalf("%d rows (%v), want %d", rows, err, keys)
	}
	if hints.n.Load() == 0 {
		t.Fatal("no hint after commits that stored events")
	}
	// Same key twice in one batch: the first stored, the second duplicate.
	var a, b bool
	var wg2 sync.WaitGroup
	wg2.Go(func() { a, _ = g.Insert(ctx, event("evt_same_batch")) })
	wg2.Go(func() { b, _ = g.Insert(ctx, event("evt_same_batch")) })
	wg2.Wait()
	if a == b {
		t.Fatalf("two inserts of one key in one batch: stored %v and %v, want exactly one", a, b)
	}
	// Each transaction that stored rows left its xmin on them.
	var xacts int
	if err := admin.QueryRow(ctx, `SELECT count(DISTINCT xmin::text) FROM webhook_ingress.events`).Scan(&xacts); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d events stored by %d transactions", keys+1, xacts)
	if xacts >= keys {
		t.Fatalf("%d transactions stored %d events: nothing was grouped", xacts, keys+1)
	}
}

// With the defaults (two committers, no wait for company) concurrent
// webhooks still share transactions: those that arrive while a batch
// commits form the next one.
func TestGroupCommitDefaultsShareTransactionsWithoutWaiting(t *testing.T) {
	t.Parallel()
	g, admin, _ := groupStore(t, ingress.GroupConfig{})
	ctx := context.Background()
	const n = 200
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			if _, err := g.Insert(ctx, event(fmt.Sprintf("evt_default_%d", i))); err != nil {
				t.Errorf("insert %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	var rows, xacts int
	if err := admin.QueryRow(ctx, `SELECT count(*), count(DISTINCT xmin::text) FROM webhook_ingress.events`).Scan(&rows, &xacts); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d events stored by %d transactions", rows, xacts)
	if rows != n || xacts > n/2 {
		t.Fatalf("%d events stored by %d transactions, want %d by at most %d", rows, xacts, n, n/2)
	}
}

// A batch with one event the database refuses fails only that event.
func TestGroupCommitFailsOnlyTheBadEvent(t *testing.T) {
	t.Parallel()
	g, admin, _ := groupStore(t, ingress.GroupConfig{MaxBatch: 16, MaxWait: 50 * time.Millisecond, Committers: 1})
	ctx := context.Background()
	bad := event("evt_bad")
	bad.Provider = "" // violates events_provider_not_empty
	var wg sync.WaitGroup
	errs := make([]error, 6)
	for i := range 6 {
		wg.Go(func() {
			e := event(fmt.Sprintf("evt_ok_%d", i))
			if i == 3 {
				e = bad
			}
			_, errs[i] = g.Insert(ctx, e)
		})
	}
	wg.Wait()
	for i, err := range errs {
		if (err != nil) != (i == 3) {
			t.Fatalf("insert %d: %v (only 3 should fail)", i, err)
		}
	}
	var rows int
	if err := admin.QueryRow(ctx, `SELECT count(*) FROM webhook_ingress.events`).Scan(&rows); err != nil || rows != 5 {
		t.Fatalf("%d rows (%v), want 5", rows, err)
	}
}

// A caller whose context ends while queued gets its error; after Close,
// Insert refuses.
func TestGroupCommitContextAndClose(t *testing.T) {
	t.Parallel()
	g, _, _ := groupStore(t, ingress.GroupConfig{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := g.Insert(ctx, event("evt_cancelled")); err == nil {
		t.Fatal("Insert with a cancelled context succeeded")
	}
	if s, err := g.Insert(context.Background(), event("evt_live")); err != nil || !s {
		t.Fatalf("Insert: %v, %v", s, err)
	}
	g.Close()
	if _, err := g.Insert(context.Background(), event("evt_after_close")); err == nil {
		t.Fatal("Insert after Close succeeded")
	}
}

// Two requests with one key in one batch: the first is stored, the second
// is its duplicate, and the stored event gets the jobs its own body passes,
// not those the duplicate's body passed (a retry need not carry the same
// bytes: filters ran on each request before the batch).
func TestGroupCommitDuplicateInBatchDoesNotRouteTheStoredEvent(t *testing.T) {
	t.Parallel()
	g, admin, _ := groupStore(t, ingress.GroupConfig{MaxBatch: 16, Committers: 1})
	ctx := context.Background()
	if _, err := admin.Exec(ctx, `INSERT INTO webhook_ingress.subscriptions (handler, provider_pattern, event_type_pattern, filter)
		VALUES ('big', 'stripe', 'charge.*', 'payload.data.object.amount > 10000')`); err != nil {
		t.Fatal(err)
	}
	evaluated := func(result string) float64 {
		return testutil.ToFloat64(mustCounter(t, g.FilterMetrics(), "big", result))
	}

	// Hold the only committer: its batch waits on a key another
	// transaction is writing, while the two requests queue behind it.
	tx, err := admin.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, event_type, headers, raw_body, signature_verified)
		VALUES ('stripe', 'stripe', 'evt_block', 'invoice.paid', '{}', '{}', true)`); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		if _, err := g.Insert(ctx, event("evt_block")); err != nil {
			t.Errorf("insert evt_block: %v", err)
		}
	})
	testwait.Eventually(t, 10*time.Second, "the committer waiting on evt_block's lock", func() (bool, string) {
		var n int
		if err := admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n > 0, fmt.Sprintf("%d sessions waiting on a lock", n)
	})
	// The small charge first (queued once its filter ran), then the same
	// event id with a large amount.
	var small, large bool
	var smallErr, largeErr error
	wg.Go(func() { small, smallErr = g.Insert(ctx, charge("evt_same", 500)) })
	// Queued, not only evaluated: under load the large one could overtake
	// it between the two (it did, once). The filter metric cannot tell:
	// it counts a verdict once its insert committed.
	testwait.Eventually(t, 10*time.Second, "the small charge evaluated and queued", func() (bool, string) {
		return g.Queued() == 1, fmt.Sprintf("%d queued", g.Queued())
	})
	wg.Go(func() { large, largeErr = g.Insert(ctx, charge("evt_same", 25000)) })
	testwait.Eventually(t, 10*time.Second, "the large charge evaluated and queued", func() (bool, string) {
		return g.Queued() == 2, fmt.Sprintf("%d queued", g.Queued())
	})
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if smallErr != nil || largeErr != nil || !small || large {
		t.Fatalf("small: stored=%v err=%v; large: stored=%v err=%v; want the small one stored, the large one its duplicate",
			small, smallErr, large, largeErr)
	}
	var amount, jobs int
	if err := admin.QueryRow(ctx, `SELECT (convert_from(e.raw_body, 'UTF8')::jsonb -> 'data' -> 'object' ->> 'amount')::int,
			(SELECT count(*) FROM webhook_ingress.jobs j WHERE j.event_id = e.id AND j.handler = 'big')
		FROM webhook_ingress.events e WHERE e.external_event_id = 'evt_same'`).Scan(&amount, &jobs); err != nil {
		t.Fatal(err)
	}
	if amount != 500 || jobs != 0 {
		t.Fatalf("stored evt_same has amount %d and %d jobs of big (filter amount > 10000), want 500 and 0", amount, jobs)
	}
	// Each request's own verdict, counted once its batch committed (the
	// duplicate's too).
	if miss, match := evaluated("miss"), evaluated("match"); miss != 1 || match != 1 {
		t.Fatalf("filter_evaluations_total{handler=big}: miss=%v match=%v, want 1 and 1", miss, match)
	}
}
