package admin_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/inlet-dev/inlet/admin"
)

// A one-job replay with an expected status runs only while the job still
// has it, checked on the job's locked row: a dead letter replayed by
// someone else and completed meanwhile is refused (409 from the API, dry
// run alike), never re-run; the same request of a job still a dead letter
// re-queues it. The dashboard's Replay buttons rely on it (review
// helper-194, dashboard/replay_review_test.go).
func TestReplayExpectStatus(t *testing.T) {
	t.Parallel()
	b := setupAPI(t)
	ctx := context.Background()
	b.subscribe(t, "billing", "stripe", "*", 5)
	ev := b.insert(t, event{source: "stripe", id: "evt_x1", eventType: "invoice.paid", body: []byte("{}")})
	job := b.jobID(t, ev, "billing")
	b.complete(t, job, 1, "w1")

	for _, dry := range []bool{true, false} {
		_, err := admin.Replay(ctx, b.op, admin.ReplayRequest{JobID: job, ExpectStatus: "dead_letter", DryRun: dry})
		wantErr(t, err, admin.ErrConflict)
		if !strings.Contains(err.Error(), "no longer a dead letter: it is completed now") {
			t.Fatalf("dry run %v: %v, want it to say the job is no longer a dead letter", dry, err)
		}
	}
	body := `{"job_id": ` + itoa(job) + `, "expect_status": "dead_letter"}`
	if code, _, out := b.call(t, "POST", "/api/replay", body); code != http.StatusConflict {
		t.Fatalf("POST /api/replay expecting a dead letter of a completed job: %d %s, want 409", code, out)
	}
	if j := b.job(t, job); j.Status != "completed" {
		t.Fatalf("refused replays left the job %s, want completed", j.Status)
	}

	b.deadLetter(t, job, 5, "http_5xx")
	if code, _, out := b.call(t, "POST", "/api/replay", body); code != http.StatusOK || b.job(t, job).Status != "pending" {
		t.Fatalf("POST /api/replay of a dead letter expecting one: %d %s, job %s; want 200 and pending", code, out, b.job(t, job).Status)
	}

	for _, bad := range []string{
		`{"job_id": ` + itoa(job) + `, "expect_status": "dead"}`,
		`{"handler": "billing", "dead_letters": true, "expect_status": "dead_letter"}`,
	} {
		if code, _, out := b.call(t, "POST", "/api/replay", bad); code != http.StatusBadRequest {
			t.Errorf("POST /api/replay %s: %d %s, want 400", bad, code, out)
		}
	}
}
