package admin_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/inlet-dev/inlet/admin"
)

// A one-job replay with an expected replay count runs only while the job has
// been replayed that many times, checked on its locked row: a completed job
// that someone else replayed and its handler completed again is completed
// still (its status passes ExpectStatus) but has one replay more, and is
// refused (409 from the API, dry run alike), never run a third time; a dead
// letter replayed and dead-lettered again alike. The count is what
// GetEvent, GetJob and ListDeadLetters show as replays; the dashboard's
// Replay buttons send it back (review helper-321,
// dashboard/reconcile_scope_and_replay_version_test.go).
func TestReplayExpectReplays(t *testing.T) {
	t.Parallel()
	b := setupAPI(t)
	ctx := context.Background()
	b.subscribe(t, "billing", "stripe", "*", 5)
	ev := b.insert(t, event{source: "stripe", id: "evt_r1", eventType: "invoice.paid", body: []byte("{}")})
	job := b.jobID(t, ev, "billing")
	b.complete(t, job, 1, "w1")

	replays := func() int {
		t.Helper()
		e, err := admin.GetEvent(ctx, b.op, ev)
		if err != nil {
			t.Fatal(err)
		}
		d, err := admin.GetJob(ctx, b.op, job)
		if err != nil {
			t.Fatal(err)
		}
		if len(e.Jobs) != 1 || e.Jobs[0].Replays != d.Replays {
			t.Fatalf("the event's job shows %+v replays, the job %d", e.Jobs, d.Replays)
		}
		return d.Replays
	}
	if n := replays(); n != 0 {
		t.Fatalf("a job never replayed shows %d replays", n)
	}
	zero := 0
	// Someone else replays it, and its handler completes it again.
	if _, err := admin.Replay(ctx, b.op, admin.ReplayRequest{JobID: job, ExpectStatus: "completed", ExpectReplays: &zero}); err != nil {
		t.Fatal(err)
	}
	b.complete(t, job, 1, "w2")
	if n := replays(); n != 1 {
		t.Fatalf("after one replay the job shows %d replays", n)
	}

	for _, dry := range []bool{true, false} {
		_, err := admin.Replay(ctx, b.op, admin.ReplayRequest{JobID: job, ExpectStatus: "completed", ExpectReplays: &zero, DryRun: dry})
		wantErr(t, err, admin.ErrConflict)
		if !strings.Contains(err.Error(), "replayed meanwhile (replay count 1 now, 0 when asked): it is completed now") {
			t.Fatalf("dry run %v: %v, want it to say the job was replayed meanwhile", dry, err)
		}
	}
	stale := `{"job_id": ` + itoa(job) + `, "expect_status": "completed", "expect_replays": 0}`
	if code, _, out := b.call(t, "POST", "/api/replay", stale); code != http.StatusConflict {
		t.Fatalf("POST /api/replay expecting no replay of a job replayed once: %d %s, want 409", code, out)
	}
	if j := b.job(t, job); j.Status != "completed" {
		t.Fatalf("refused replays left the job %s, want completed", j.Status)
	}
	if n := b.count(t, `SELECT count(*) FROM webhook_ingress.job_attempts WHERE job_id = $1 AND outcome = 'replayed'`, job); n != 1 {
		t.Fatalf("%d replay markers after the refused replays, want 1", n)
	}

	// The current count passes; a dead letter replayed and dead-lettered
	// again meanwhile is refused the same way.
	current := `{"job_id": ` + itoa(job) + `, "expect_status": "completed", "expect_replays": 1}`
	if code, _, out := b.call(t, "POST", "/api/replay", current); code != http.StatusOK || b.job(t, job).Status != "pending" {
		t.Fatalf("POST /api/replay with the job's replay count: %d %s, job %s; want 200 and pending", code, out, b.job(t, job).Status)
	}
	b.deadLetter(t, job, 5, "http_5xx")
	page, err := admin.ListDeadLetters(ctx, b.op, admin.DeadLetterFilter{Handler: "billing"})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.DeadLetters) != 1 || page.DeadLetters[0].Replays != 2 {
		t.Fatalf("dead letters %+v, want job %d with 2 replays", page.DeadLetters, job)
	}
	one := 1
	_, err = admin.Replay(ctx, b.op, admin.ReplayRequest{JobID: job, ExpectStatus: "dead_letter", ExpectReplays: &one})
	wantErr(t, err, admin.ErrConflict)
	code, _, out := b.call(t, "GET", "/api/dlq?handler=billing", "")
	var listed struct {
		DeadLetters []struct {
			Replays *int `json:"replays"`
		} `json:"dead_letters"`
	}
	if err := json.Unmarshal(out, &listed); code != http.StatusOK || err != nil || len(listed.DeadLetters) != 1 ||
		listed.DeadLetters[0].Replays == nil || *listed.DeadLetters[0].Replays != 2 {
		t.Fatalf("GET /api/dlq: %d %s (%v), want the dead letter with \"replays\": 2", code, out, err)
	}
	// Without expect_replays nothing is checked (scripts, older pages).
	if code, _, out := b.call(t, "POST", "/api/replay", `{"job_id": `+itoa(job)+`, "expect_status": "dead_letter"}`); code != http.StatusOK {
		t.Fatalf("POST /api/replay without expect_replays: %d %s, want 200", code, out)
	}

	for _, bad := range []string{
		`{"job_id": ` + itoa(job) + `, "expect_replays": -1}`,
		`{"handler": "billing", "dead_letters": true, "expect_replays": 0}`,
	} {
		if code, _, out := b.call(t, "POST", "/api/replay", bad); code != http.StatusBadRequest {
			t.Errorf("POST /api/replay %s: %d %s, want 400", bad, code, out)
		}
	}
}
