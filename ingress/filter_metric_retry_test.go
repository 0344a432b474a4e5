package ingress_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/inlet-dev/inlet/ingress"
	"github.com/inlet-dev/inlet/internal/testwait"
)

// TestFilterMetricCountsTheVerdictThatApplied (review helper-223, fixed;
// this describes the code before the fix).
//
// Defect: inlet_ingress_filter_evaluations_total{handler,result} is meant to
// count one verdict per event (docs/pipeline.md "Counted per handler";
// the helper-116 fix and CHANGELOG: an event evaluated twice is a bug). When
// a filter changes while an event is in flight, the insert is refused with
// IN001 and PGStore.insertMatched (ingress/store.go) matches the event
// again on the fresh copy through filters.match (ingress/filters.go), which
// increments the counter a second time. The first verdict, taken on the
// out-of-date copy and thrown away, stays counted: an event that the new
// filter rejects (no job) is reported as a match AND a miss. Every event in
// flight at every filter change is counted twice (GroupStore.commit's
// default branch goes through the same insertMatched), so match counts
// exceed the jobs made exactly when an operator is checking a new filter.
// Setup: a filtered subscription (amount > 10); a gate trigger holds the
// insert of a 500-amount charge after ingress read its copy; meanwhile the
// filter is changed for real (amount > 1000, committed from another
// connection); the gate opens.
// Expected: one verdict for the one event, the one that applied: miss=1,
// match=0 (and no job, which holds).
// Observed: match=1, miss=1 for one stored event with no job.
// Fixed by: filters.match counts nothing and returns its verdicts;
// filters.count adds them once the insert that used them committed
// (PGStore.insertMatched, and GroupStore.commit for a batch), so the
// verdicts of an insert refused with IN001 are thrown away with it.
// The group-commit path is checked too: its batch is refused the same way
// and stored again event by event (GroupStore.commit).
func TestFilterMetricCountsTheVerdictThatApplied(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		store func(*ingress.PGStore, *ingress.GroupStore) filterMetricStore
	}{
		{"single", func(s *ingress.PGStore, _ *ingress.GroupStore) filterMetricStore { return s }},
		{"group", func(_ *ingress.PGStore, g *ingress.GroupStore) filterMetricStore { return g }},
	} {
		// One after the other: each holds its gate while its filter changes.
		t.Run(c.name, func(t *testing.T) {
			admin, single, group := filterStores(t, `('rv223', 'stripe', 'charge.*', 'payload.data.object.amount > 10')`)
			filterMetricCountsTheVerdictThatApplied(t, admin, c.store(single, group))
		})
	}
}

// filterMetricStore is what the test needs of PGStore and GroupStore.
type filterMetricStore interface {
	ingress.Store
	FilterMetrics() prometheus.Collector
}

func filterMetricCountsTheVerdictThatApplied(t *testing.T, admin *pgxpool.Pool, store filterMetricStore) {
	t.Helper()
	ctx := context.Background()
	const gateKey = 223223
	if _, err := admin.Exec(ctx, fmt.Sprintf(`CREATE FUNCTION webhook_ingress.review_223_gate() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			PERFORM pg_advisory_lock(%[1]d);
			PERFORM pg_advisory_unlock(%[1]d);
			RETURN NEW;
		END $$`, gateKey)); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(ctx, `CREATE TRIGGER a_review_223_gate BEFORE INSERT ON webhook_ingress.events
		FOR EACH ROW WHEN (NEW.external_event_id = 'evt_r223_gated') EXECUTE FUNCTION webhook_ingress.review_223_gate()`); err != nil {
		t.Fatal(err)
	}
	gate, err := admin.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer gate.Release()
	if _, err := gate.Exec(ctx, `SELECT pg_advisory_lock($1)`, gateKey); err != nil {
		t.Fatal(err)
	}
	released := false
	release := func() {
		if !released {
			released = true
			if _, err := gate.Exec(ctx, `SELECT pg_advisory_unlock($1)`, gateKey); err != nil {
				t.Error(err)
			}
		}
	}
	defer release()

	type result struct {
		stored bool
		err    error
	}
	done := make(chan result, 1)
	insertCtx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	go func() {
		s, err := store.Insert(insertCtx, charge("evt_r223_gated", 500))
		done <- result{s, err}
	}()
	testwait.Eventually(t, 30*time.Second, "the insert held by the gate", func() (bool, string) {
		var n int
		_ = admin.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND objid = $1
			AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`, gateKey).Scan(&n)
		return n == 1, fmt.Sprintf("%d waiting", n)
	})
	// A real change of the filter, committed while the event is in flight.
	if _, err := admin.Exec(ctx, `UPDATE webhook_ingress.subscriptions SET filter = 'payload.data.object.amount > 1000' WHERE handler = 'rv223'`); err != nil {
		t.Fatal(err)
	}
	release()
	r := <-done
	if r.err != nil || !r.stored {
		t.Fatalf("insert: stored=%v err=%v", r.stored, r.err)
	}
	var jobs int
	if err := admin.QueryRow(ctx, `SELECT count(*) FROM webhook_ingress.jobs WHERE handler = 'rv223'`).Scan(&jobs); err != nil {
		t.Fatal(err)
	}
	if jobs != 0 {
		t.Fatalf("%d jobs of rv223 for an event the new filter rejects, want 0", jobs)
	}
	fm := store.FilterMetrics()
	match := testutil.ToFloat64(mustCounter(t, fm, "rv223", "match"))
	miss := testutil.ToFloat64(mustCounter(t, fm, "rv223", "miss"))
	errs := testutil.ToFloat64(mustCounter(t, fm, "rv223", "error"))
	if match+miss+errs != 1 || match != 0 {
		t.Fatalf("one stored event, no job: inlet_ingress_filter_evaluations_total{handler=rv223} match=%v miss=%v error=%v; "+
			"want one verdict, the one that applied (miss=1, match=0): the verdict of the out-of-date copy, "+
			"discarded when the insert was refused (IN001), is still counted", match, miss, errs)
	}
}
