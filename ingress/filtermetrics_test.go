package ingress_test

import (
	"context"
	"fmt"
	"sync"
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

// TestFilterEvaluationsNotDoubleCountedOnBatchRetry: an event of a
// group-commit batch stored again alone (another event's data failed the
// batch) is counted once in the filter metric.
//
// Regression test (review helper-116; fixed by PGStore.insertMatched: the
// text describes the behaviour before the fix). inlet_ingress_filter_evaluations_total{handler,result} is
// documented (docs/pipeline.md, "Counted per handler ... per event") as one
// evaluation per event. GroupStore.Insert evaluates the subscription filters
// of its event (filters.match, ingress/groupcommit.go Insert) before
// queueing it; when the group-commit batch then fails on ANOTHER event's data
// (here a CHECK violation), GroupStore.commit's `default:` branch stores
// every event of the batch alone through g.single.Insert
// (ingress/groupcommit.go, the `default:` case of commit), and PGStore.Insert
// evaluates the filters of each event AGAIN (ingress/store.go, the
// s.filters.match call at the top of PGStore.Insert). Every innocent
// webhook that shared a batch with one bad event is counted twice: one
// request, one stored event, one job, two "match" (or "miss"/"error")
// increments. An operator alerting on the rate of result="error" (a filter
// that cannot be evaluated) or comparing matches with the handler's jobs
// sees numbers inflated by whatever batch faults happen.
//
// Expected: 5 good events, each evaluated once → match = 5 (and 5 jobs).
// Got: match = 10.
func TestFilterEvaluationsNotDoubleCountedOnBatchRetry(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	admin, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admin.Close)
	for _, q := range []string{
		`INSERT INTO webhook_ingress.subscriptions (handler, provider_pattern, event_type_pattern, filter)
		 VALUES ('rv-big', 'stripe', 'charge.*', 'payload.data.object.amount > 10')`,
		// A gate: the event of type review.gate holds the only committer
		// for 1.5 s, so the next events queue and form one batch.
		`CREATE FUNCTION webhook_ingress.review_fm_gate() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF NEW.event_type = 'review.gate' THEN
				PERFORM pg_sleep(1.5);
			END IF;
			RETURN NEW;
		END $$`,
		`CREATE TRIGGER a_review_fm_gate BEFORE INSERT ON webhook_ingress.events FOR EACH ROW EXECUTE FUNCTION webhook_ingress.review_fm_gate()`,
	} {
		if _, err := admin.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	pool, err := database.Open(ctx, url, database.Options{Role: schema.IngressRole, MaxConns: 8})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	g := ingress.NewGroupStore(pool, nil, ingress.GroupConfig{Committers: 1, MaxBatch: 64, Timeout: 10 * time.Second})
	t.Cleanup(g.Close)

	gate := event("evt_fm_gate")
	gate.EventType = "review.gate" // not charge.*: not evaluated by rv-big
	gateDone := make(chan error, 1)
	go func() { _, err := g.Insert(ctx, gate); gateDone <- err }()
	testwait.Eventually(t, 10*time.Second, "the gate's batch sleeping in its trigger", func() (bool, string) {
		var n int
		_ = admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event = 'PgSleep'`).Scan(&n)
		return n == 1, fmt.Sprintf("%d sleeping", n)
	})

	const good = 5
	var wg sync.WaitGroup
	errs := make([]error, good+1)
	for i := range good + 1 {
		e := charge(fmt.Sprintf("evt_fm_%d", i), 100)
		if i == good {
			e = event("evt_fm_bad")
			e.Provider = "" // violates events_provider_not_empty: fails the batch on its own data
		}
		wg.Go(func() { _, errs[i] = g.Insert(ctx, e) })
	}
	testwait.Eventually(t, 10*time.Second, "the events queued behind the gate", func() (bool, string) {
		return g.Queued() == good+1, fmt.Sprintf("%d queued", g.Queued())
	})
	if err := <-gateDone; err != nil {
		t.Fatalf("gate: %v", err)
	}
	wg.Wait()
	for i := range good {
		if errs[i] != nil {
			t.Fatalf("good event %d: %v", i, errs[i])
		}
	}
	if errs[good] == nil {
		t.Fatal("the bad event was stored")
	}
	var jobs int
	if err := admin.QueryRow(ctx, `SELECT count(*) FROM webhook_ingress.jobs WHERE handler = 'rv-big'`).Scan(&jobs); err != nil {
		t.Fatal(err)
	}
	if jobs != good {
		t.Fatalf("%d jobs of rv-big, want %d", jobs, good)
	}
	match := testutil.ToFloat64(mustCounter(t, g.FilterMetrics(), "rv-big", "match"))
	if match != good {
		t.Fatalf("inlet_ingress_filter_evaluations_total{handler=rv-big,result=match} = %v after %d webhooks (each evaluated once, %d jobs), want %d: "+
			"the batch's per-event retry evaluated every event again", match, good, jobs, good)
	}
}
