package ingress_test

import (
	"context"
	"strings"
	"testing"
	"time"
)

// A filter's evaluation is bounded in time: deep comparisons of large payload
// values inside a comprehension no longer hold a webhook for seconds.
//
// Regression test (review helper-127; fixed: the text describes the
// behaviour before the fix). docs/pipeline.md and package filter promise "Evaluation is bounded
// in cost (the payload is the sender's)": filter.Compile sets
// cel.CostLimit(100_000). But CEL charges an equality by the size of its
// operands' top level (0.1 × min(len) units), while comparing two lists or
// maps walks them to the bottom. A filter that compares two parts of the
// payload inside a comprehension, such as
//
//	payload.items.exists(i, payload.shipping != payload.billing && i.taxable)
//
// is charged ~1 unit per iteration while each iteration walks the whole of
// both parts: with a sender's body of half a MiB (20 000 items, and the two
// parts each [[0,0,…110 000 zeros]]) one evaluation runs ~20 s of CPU (~2 min
// at 1 MiB) before the cost limit fires. The evaluation runs in the request's
// goroutine before the event is queued for its batch and is given no
// context, so the request's store timeout does not stop it: Insert answers
// only after it, the webhook stays unanswered for that long, a core is
// burnt, and the provider's retries (it timed out) each burn another.
//
// Expected: one evaluation is bounded (in time, not only in CEL's units) and
// Insert honours its context: here it returns within a few seconds of the
// 2 s deadline, whatever the filter concludes (a miss counted as an error is
// fine).
func TestFilterEvaluationIsBoundedInTime(t *testing.T) {
	_, _, group := filterStores(t, `
		('taxable', 'stripe', '*', 'payload.a.exists(i, payload.b != payload.c && i == 2)')`)

	var sb strings.Builder
	list := func(n int, v string) {
		for i := range n {
			if i > 0 {
				sb.WriteByte(',')
			}
			sb.WriteString(v)
		}
	}
	sb.WriteString(`{"id":"evt_cost","a":[`)
	list(20000, "1")
	sb.WriteString(`],"b":[[`)
	list(110000, "0")
	sb.WriteString(`]],"c":[[`)
	list(110000, "0")
	sb.WriteString(`]]}`)
	e := event("evt_cost")
	e.RawBody = []byte(sb.String()) // ~480 KB, under filter.MaxPayload

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second) // ingress.store_timeout
	defer cancel()
	done := make(chan error, 1)
	start := time.Now()
	go func() {
		_, err := group.Insert(ctx, e)
		done <- err
	}()
	select {
	case err := <-done:
		t.Logf("Insert returned after %v: %v", time.Since(start), err)
	case <-time.After(8 * time.Second):
		// The evaluation goes on in its goroutine until the test binary exits.
		t.Fatalf("Insert of one ~%d KB webhook with a 2 s deadline has not returned after %v: "+
			"the filter's evaluation is not bounded by the cost limit nor by the request's context",
			len(e.RawBody)>>10, time.Since(start).Round(time.Second))
	}
}
