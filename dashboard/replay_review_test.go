package dashboard_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/admin"
)

// replayForm is the hidden fields of the Replay form of job on page, nil
// when the page has none.
func replayForm(page string, job int64) url.Values {
	formRe := regexp.MustCompile(`(?s)<form method="post" action="/dashboard/replay"[^>]*>(.*?)</form>`)
	inputRe := regexp.MustCompile(`<input type="hidden" name="([^"]+)" value="([^"]*)">`)
	for _, m := range formRe.FindAllStringSubmatch(page, -1) {
		f := url.Values{}
		for _, in := range inputRe.FindAllStringSubmatch(m[1], -1) {
			f.Add(in[1], in[2])
		}
		if f.Get("job_id") == fmt.Sprint(job) {
			return f
		}
	}
	return nil
}

// TestStaleDeadLetterReplayButtonRerunsACompletedJob (review helper-194;
// this describes the code before the fix).
//
// Defect: the overview lists dead letters, each with a Replay button whose
// form carries only the job id. POST /dashboard/replay calls
// admin.Replay(ReplayRequest{JobID: id}), which re-queues the job whatever
// its status is now. When the page is stale (a second operator, another
// tab, or the CLI replayed the dead letter meanwhile and the handler has
// since completed it), pressing the button shown for a *dead letter*
// re-runs a *completed* job: the handler's side effects happen again and
// its success is archived as if the operator had asked for a new run.
// inlet replay --handler H --dead-letters guards against exactly this
// ("with dead_letters_only … so is one that is no longer a dead letter
// (replayed meanwhile by someone else)", schema/queries/admin.sql
// AdminRequeueJobs); the dashboard's dead-letter button does not.
//
// Expected: a Replay button shown for a dead letter replays the job only
// while it is still a dead letter; otherwise it answers "Not replayed:
// no longer a dead letter" and leaves the completed job alone.
//
// Root cause: dashboard/pages.go replay (admin.Replay with JobID only) and
// dashboard/templates/layout.html "replay" form (job_id only, no expected
// state); admin.ReplayRequest had no way to say "only if still <status>".
// Before the fix this test failed with "re-queued the completed job (now
// pending, 2 replay markers)"; now the form carries expect_status and
// admin.Replay checks it on the job's locked row.
func TestStaleDeadLetterReplayButtonRerunsACompletedJob(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	b.subscribe(t, "billing", "stripe")
	ev := b.insert(t, "stripe", "evt_stale", []byte(`{"id":"evt_stale"}`), b.now.Add(-time.Hour))
	job := b.jobID(t, ev, "billing")
	b.deadLetter(t, job)

	// Operator A opens the overview: the dead letter with its Replay button.
	c := b.client(t)
	c.login()
	page := c.get("/dashboard/")
	form := replayForm(page.body, job)
	if form == nil {
		t.Fatalf("overview lacks the dead letter's replay form:\n%s", page.body)
	}

	// Meanwhile operator B replays it (CLI / API), and the handler runs it
	// successfully.
	if _, err := admin.Replay(context.Background(), b.op, admin.ReplayRequest{Handler: "billing", DeadLetters: true}); err != nil {
		t.Fatal(err)
	}
	b.complete(t, job, b.now)
	if s := b.status(t, job); s != "completed" {
		t.Fatalf("setup: job is %s", s)
	}

	// Operator A now presses the Replay button of the stale dead-letter row.
	r := c.do("POST", "/dashboard/replay", form, c.sameOrigin())
	if r.code >= 500 {
		t.Fatalf("replay: %d\n%s", r.code, r.body)
	}
	if s := b.status(t, job); s != "completed" {
		var markers int
		_ = b.super.QueryRow(context.Background(),
			`SELECT count(*) FROM webhook_ingress.job_attempts WHERE job_id = $1 AND outcome = 'replayed'`, job).Scan(&markers)
		t.Fatalf("the Replay button of a dead letter that was meanwhile replayed and completed re-queued the "+
			"completed job (now %s, %d replay markers): its handler runs the event again", s, markers)
	}
	if body := c.get("/dashboard/").body; !strings.Contains(body, "Not replayed") ||
		!strings.Contains(body, "no longer a dead letter: it is completed now") {
		t.Fatalf("the refused replay says nothing to the operator (want Not replayed: … no longer a dead letter: it is completed now):\n%s", body)
	}

	// A dead letter again, the stale form is still refused: the job was
	// replayed since the page was rendered (its replay count moved, review
	// helper-321; before the form carried expect_replays it re-queued).
	b.deadLetter(t, job)
	if r := c.do("POST", "/dashboard/replay", form, c.sameOrigin()); r.code != http.StatusSeeOther || b.status(t, job) != "dead_letter" {
		t.Fatalf("the stale form of a dead letter replayed and dead-lettered again meanwhile: %d, job %s, want 303 and still a dead letter",
			r.code, b.status(t, job))
	}
	if body := c.get("/dashboard/").body; !strings.Contains(body, "replayed meanwhile") {
		t.Fatalf("the refused replay does not say the job was replayed meanwhile:\n%s", body)
	}
	// The button still works while the page is current: the form of the
	// overview rendered now re-queues it.
	current := replayForm(c.get("/dashboard/").body, job)
	if current == nil {
		t.Fatal("the overview lacks the dead letter's replay form")
	}
	if r := c.do("POST", "/dashboard/replay", current, c.sameOrigin()); r.code != http.StatusSeeOther || b.status(t, job) != "pending" {
		t.Fatalf("replay of a dead letter from its button: %d, job %s, want 303 and pending", r.code, b.status(t, job))
	}
}

// An event page's Replay button carries the job's status as the page
// rendered it: pressed after the job moved (a completed job replayed
// meanwhile, now pending), it is refused and says so.
func TestEventPageReplayButtonExpectsTheStatusShown(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	b.subscribe(t, "billing", "stripe")
	ev := b.insert(t, "stripe", "evt_done", []byte(`{"id":"evt_done"}`), b.now.Add(-time.Hour))
	job := b.jobID(t, ev, "billing")
	b.complete(t, job, b.now)

	c := b.client(t)
	c.login()
	path := fmt.Sprintf("/dashboard/events/%d", ev)
	form := replayForm(c.get(path).body, job)
	if form == nil || form.Get("expect_status") != "completed" {
		t.Fatalf("the event page's replay form of a completed job: %v, want expect_status=completed", form)
	}
	if _, err := admin.Replay(context.Background(), b.op, admin.ReplayRequest{JobID: job}); err != nil {
		t.Fatal(err)
	}
	if r := c.do("POST", "/dashboard/replay", form, c.sameOrigin()); r.code != http.StatusSeeOther {
		t.Fatalf("replay: %d\n%s", r.code, r.body)
	}
	body := c.get(path).body
	if !strings.Contains(body, "Not replayed") || !strings.Contains(body, "no longer completed: it is pending now") {
		t.Fatalf("a replay of a job no longer completed was not refused:\n%s", body)
	}
	var markers int
	if err := b.super.QueryRow(context.Background(),
		`SELECT count(*) FROM webhook_ingress.job_attempts WHERE job_id = $1 AND outcome = 'replayed'`, job).Scan(&markers); err != nil {
		t.Fatal(err)
	}
	if markers != 1 {
		t.Fatalf("%d replay markers, want 1 (the first replay only)", markers)
	}
}
