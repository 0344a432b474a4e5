package ingress_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
)

// TestFilterMatchSurvivesConcurrentLoad, before the fix: a subscription filter that
// matches an event when the event arrives alone misses it when the same
// event arrives among a burst of others: the load on the process decides
// whether a handler gets an event, and the event is lost to that handler.
//
// Regression test (review helper-129; fixed: the text describes the
// behaviour before the fix). filter.Match (filter/filter.go, MaxEvalTime = 250 ms, the
// context.WithTimeout around ContextEval) bounds each evaluation by WALL
// CLOCK time and turns "deadline exceeded" into a miss (ingress/filters.go
// match: an error is counted and no job is written). A legitimate filter
// (one exists() over the line items, well within the deterministic cost
// limit: it matches alone) on a ~280 KB body takes a few ms of CPU (tens
// of ms under -race); ingress evaluates it in each request's goroutine, so
// with N such webhooks in flight on a 2-core ingress (96 here, 27 MiB: far
// inside the default ingress.max_inflight_bytes of 32 MiB) each evaluation
// gets ~2/N of a core and its wall time passes 250 ms. filter.go's comment
// says "the bound is far above it, so no pause of the process turns a match
// into a miss", and MaxPayload's says one event passes or fails a filter
// the same way on each path: a catch-up (admin/replayfilter.go) evaluating
// the same event later, serially, matches it.
//
// Expected: whether an event matches a filter depends on the event and the
// filter only: every stored event of the burst gets its 'bulk' job (the
// bound is now deterministic, deep cost; an evaluation that outlives its
// request's deadline fails the insert, which the provider retries).
func TestFilterMatchSurvivesConcurrentLoad(t *testing.T) {
	// A 2-core ingress, as this machine and a small pod are.
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	ctx := context.Background()
	admin, _, group := filterStores(t, `
		('bulk', 'stripe', '*', 'payload.items.exists(i, i.sku == "SKU-009999")'),
		('all', 'stripe', '*', NULL)`)

	body := func(id string) []byte {
		var sb strings.Builder
		fmt.Fprintf(&sb, `{"id":%q,"items":[`, id)
		for i := range 10000 {
			if i > 0 {
				sb.WriteByte(',')
			}
			fmt.Fprintf(&sb, `{"sku":"SKU-%06d","qty":1}`, i)
		}
		sb.WriteString(`]}`)
		return []byte(sb.String())
	}
	jobs := func(handler string) int {
		var n int
		if err := admin.QueryRow(ctx, `SELECT count(*) FROM webhook_ingress.jobs WHERE handler = $1`, handler).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	// Alone, the event matches: the filter is within the cost limit.
	alone := event("evt_alone")
	alone.RawBody = body("evt_alone")
	if _, err := group.Insert(ctx, alone); err != nil {
		t.Fatal(err)
	}
	if n := jobs("bulk"); n != 1 {
		t.Fatalf("premise: the event inserted alone got %d 'bulk' jobs, want 1", n)
	}

	// Under load an insert may run out of its store timeout (answered 503:
	// the provider retries); one that is stored has its 'bulk' job, however
	// loaded the machine.
	const burst = 96
	var (
		wg       sync.WaitGroup
		start    = make(chan struct{})
		mu       sync.Mutex
		timedOut int
	)
	for i := range burst {
		e := event(fmt.Sprintf("evt_burst_%d", i))
		e.RawBody = body(e.ExternalID)
		wg.Go(func() {
			<-start // the burst arrives at once
			if _, err := group.Insert(ctx, e); err != nil {
				if !errors.Is(err, context.DeadlineExceeded) {
					t.Error(err)
				}
				mu.Lock()
				timedOut++
				mu.Unlock()
			}
		})
	}
	close(start)
	wg.Wait()
	all, bulk := jobs("all")-1, jobs("bulk")-1
	t.Logf("%d of %d stored, %d ran out of their store timeout (not acknowledged)", all, burst, timedOut)
	if all+timedOut < burst {
		t.Fatalf("%d of %d events stored and %d timed out: some were lost", all, burst, timedOut)
	}
	if bulk != all {
		t.Errorf("%d of %d stored events, each one matching the filter when it arrives alone, got their 'bulk' job: "+
			"%d were dropped from the handler (their evaluation judged a miss under load)", bulk, all, all-bulk)
	}
}
