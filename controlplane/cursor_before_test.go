package controlplane_test

import (
	"encoding/json"
	"testing"

	"github.com/inlet-dev/inlet/reporter"
)

// A report's answer carries the tenant's cursor as it was before the batch
// (cursor_before), so a reporter notices a control plane restored from a
// backup (its cursor below what it acknowledged) and sends the lost records
// again (review helper-311). The answer keeps received and stored as before,
// and the cursor is the tenant's own.
func TestReportAnswerCarriesTheCursorBeforeTheBatch(t *testing.T) {
	t.Parallel()
	b := setup(t)
	answer := func(token string, recs ...reporter.Record) reporter.Answer {
		t.Helper()
		code, body := b.post(t, token, recs...)
		if code != 200 {
			t.Fatalf("post: %d %s", code, body)
		}
		var a reporter.Answer
		if err := json.Unmarshal([]byte(body), &a); err != nil {
			t.Fatalf("answer %s: %v", body, err)
		}
		if a.CursorBefore == nil {
			t.Fatalf("answer %s has no cursor_before", body)
		}
		return a
	}
	for _, step := range []struct {
		what           string
		token          string
		ids            []int64
		stored, cursor int64
	}{
		{"first batch", tokenA, []int64{1, 2, 5}, 3, 0},
		{"the same batch again", tokenA, []int64{1, 2, 5}, 0, 5},
		{"a late record below the cursor", tokenA, []int64{3}, 1, 5},
		{"the next batch", tokenA, []int64{6, 9}, 2, 5},
		{"another tenant's first batch", tokenB, []int64{4}, 1, 0},
		{"an empty batch", tokenA, nil, 0, 9},
	} {
		recs := []reporter.Record{}
		for _, id := range step.ids {
			recs = append(recs, record(id, reporter.OutcomeCompleted, ""))
		}
		a := answer(step.token, recs...)
		if a.Received != len(recs) || a.Stored != step.stored || *a.CursorBefore != step.cursor {
			t.Errorf("%s: received %d, stored %d, cursor_before %d; want %d, %d, %d",
				step.what, a.Received, a.Stored, *a.CursorBefore, len(recs), step.stored, step.cursor)
		}
	}
	// A restore from a backup: the records after 5 gone. The next answer
	// says so, though the batch itself raises the cursor again.
	if _, err := b.pool.Exec(t.Context(), `DELETE FROM control_plane.attempts WHERE tenant = 'alpha' AND attempt_id > 5`); err != nil {
		t.Fatal(err)
	}
	if a := answer(tokenA, record(10, reporter.OutcomeCompleted, "")); *a.CursorBefore != 5 {
		t.Errorf("after the restore: cursor_before %d, want 5", *a.CursorBefore)
	}
}
