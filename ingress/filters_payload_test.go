package ingress_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/inlet-dev/inlet/ingress"
)

func filteredJobCount(t *testing.T, admin *pgxpool.Pool, handler, externalID string) int {
	t.Helper()
	var n int
	if err := admin.QueryRow(context.Background(), `SELECT count(*) FROM webhook_ingress.jobs j JOIN webhook_ingress.events e ON e.id = j.event_id
		WHERE j.handler = $1 AND e.external_event_id = $2`, handler, externalID).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// Regression test (review helper-93; fixed: the text describes the behaviour
// before the fix). a filter sees payload = null for a body that IS valid JSON when
// any number in it is outside float64's range (1e400: legal JSON, RFC 8259
// sets no range; PostgreSQL's jsonb keeps it as numeric, so the stored
// payload column has the whole object). filter.ParsePayload
// (filter/filter.go:58-67) decodes with encoding/json into `any`, whose
// float64 conversion fails for the whole document, so every field is lost,
// not just that number. The package doc and docs/pipeline.md promise payload
// is null only "when the body is not JSON or is over 1 MiB". Here a handler
// filtering on payload.kind == "gold" gets no job for a "gold" event whose
// stored payload (what an auditor sees with --where) says kind = "gold":
// the event is silently routed nowhere for it, and counted as a filter
// "error" on an unrelated field.
//
// Expected: the event passes the filter (payload parsed; the out-of-range
// number may read as ±Inf or be kept as a string), a job of "gold" exists.
func TestFilterSeesTheBodyOfValidJSONWithAHugeNumber(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	admin, single, group := filterStores(t, `('gold', 'stripe', '*', 'payload.kind == "gold"')`)
	for _, c := range []struct {
		name  string
		store ingress.Store
	}{{"single", single}, {"group", group}} {
		e := event("evt_huge_" + c.name)
		e.RawBody = []byte(`{"id":"evt_huge_` + c.name + `","kind":"gold","score":1e400}`)
		e.StoreJSON = ingress.JSONCopyable(e.RawBody, 1<<20)
		if !e.StoreJSON {
			t.Fatalf("%s: ingress.JSONCopyable says the body is not JSON", c.name)
		}
		if stored, err := c.store.Insert(ctx, e); err != nil || !stored {
			t.Fatalf("%s: insert: stored=%v err=%v", c.name, stored, err)
		}
		var kind *string
		if err := admin.QueryRow(ctx, `SELECT payload->>'kind' FROM webhook_ingress.events WHERE external_event_id = $1`, e.ExternalID).Scan(&kind); err != nil {
			t.Fatal(err)
		}
		if kind == nil || *kind != "gold" {
			t.Fatalf("%s: stored payload->>'kind' = %v, want gold (the JSON copy parses the body)", c.name, kind)
		}
		if n := filteredJobCount(t, admin, "gold", e.ExternalID); n != 1 {
			t.Errorf("%s path: the stored payload says kind=gold, but handler gold (filter payload.kind == \"gold\") has %d jobs for it, want 1: "+
				"the filter saw payload = null for a valid JSON body", c.name, n)
		}
	}
}

// Regression test (review helper-93; fixed: the text describes the behaviour
// before the fix). a filtered subscription whose expression ingress cannot compile
// (a row from a consumer built against a newer filter module, e.g. one
// using a CEL extension such as strings' lowerAscii(); or written by hand)
// silently drops every event of its patterns for its handler, and the
// metric says nothing: ingress/filters.go:114-125 skips the row with
// `continue` (one log line per process lifetime) and match() never sees it,
// so inlet_ingress_filter_evaluations_total has no count at all for the
// handler, although the comment there promises "its handler gets no jobs
// from it, which the metric and this line say". An operator alerting on
// result="error" (the documented way to see filters failing) sees nothing.
//
// Expected: each event whose source/type match the broken subscription's
// patterns is counted {handler="skewed",result="error"} (as an evaluation
// that failed), so the loss is visible in metrics.
func TestAFilterThatDoesNotCompileIsCountedAsAnError(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, single, group := filterStores(t, `('skewed', 'stripe', '*', 'payload.kind.lowerAscii() == "gold"')`)
	for _, c := range []struct {
		name  string
		store ingress.Store
	}{{"single", single}, {"group", group}} {
		e := event("evt_skew_" + c.name)
		e.RawBody = []byte(`{"id":"evt_skew_` + c.name + `","kind":"GOLD"}`)
		if stored, err := c.store.Insert(ctx, e); err != nil || !stored {
			t.Fatalf("%s: insert: stored=%v err=%v", c.name, stored, err)
		}
	}
	got := testutil.ToFloat64(mustCounter(t, single.FilterMetrics(), "skewed", "error")) +
		testutil.ToFloat64(mustCounter(t, single.FilterMetrics(), "skewed", "miss"))
	if got != 1 {
		t.Errorf("single store: filter_evaluations_total{handler=skewed,result=error|miss} = %v, want 1: "+
			"an event that matched the subscription's patterns lost its job to a filter ingress cannot compile, and no metric says so", got)
	}
	got = testutil.ToFloat64(mustCounter(t, group.FilterMetrics(), "skewed", "error")) +
		testutil.ToFloat64(mustCounter(t, group.FilterMetrics(), "skewed", "miss"))
	if got != 1 {
		t.Errorf("group store: filter_evaluations_total{handler=skewed,result=error|miss} = %v, want 1", got)
	}
}
