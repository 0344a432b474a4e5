package admin_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/admin"
)

func TestDlqListAndShow(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.subscribe(t, "billing", "stripe", "*", 3)
	b.subscribe(t, "audit", "*", "*", 3)
	s1 := b.insert(t, event{source: "stripe", id: "evt_1", eventType: "invoice.paid", body: []byte("{}")})
	s2 := b.insert(t, event{source: "stripe", id: "evt_2", eventType: "invoice.paid", body: []byte("{}")})
	g1 := b.insert(t, event{source: "github", id: "gh_1", eventType: "push", body: []byte("{}")})
	b.deadLetter(t, b.jobID(t, s1, "billing"), 3, "http_5xx")
	b.deadLetter(t, b.jobID(t, s2, "billing"), 1, "permanent")
	b.deadLetter(t, b.jobID(t, g1, "audit"), 3, "timeout")
	b.exec(t, `UPDATE webhook_ingress.jobs SET updated_at = now() - interval '2 days' WHERE event_id = $1`, g1)

	list := func(f admin.DeadLetterFilter) []string {
		t.Helper()
		page, err := admin.ListDeadLetters(ctx, b.op, f)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, d := range page.DeadLetters {
			got = append(got, d.Handler+":"+d.ExternalEventID+":"+d.LastErrorClass)
		}
		return got
	}
	cases := []struct {
		name string
		f    admin.DeadLetterFilter
		want string
	}{
		{"all", admin.DeadLetterFilter{}, "[audit:gh_1:timeout billing:evt_2:permanent billing:evt_1:http_5xx]"},
		{"handler", admin.DeadLetterFilter{Handler: "billing"}, "[billing:evt_2:permanent billing:evt_1:http_5xx]"},
		{"source", admin.DeadLetterFilter{Provider: "github"}, "[audit:gh_1:timeout]"},
		{"error class", admin.DeadLetterFilter{ErrorClass: "permanent"}, "[billing:evt_2:permanent]"},
		{"since", admin.DeadLetterFilter{Since: time.Now().Add(-time.Hour)}, "[billing:evt_2:permanent billing:evt_1:http_5xx]"},
		{"until", admin.DeadLetterFilter{Until: time.Now().Add(-time.Hour)}, "[audit:gh_1:timeout]"},
		{"limit", admin.DeadLetterFilter{Limit: 1}, "[audit:gh_1:timeout]"},
		{"nothing", admin.DeadLetterFilter{Handler: "nobody"}, "[]"},
	}
	for _, c := range cases {
		if got := fmt.Sprint(list(c.f)); got != c.want && !(c.want == "[]" && got == "[]") {
			t.Errorf("%s: %s, want %s", c.name, got, c.want)
		}
	}
	page, err := admin.ListDeadLetters(ctx, b.op, admin.DeadLetterFilter{Limit: 2})
	if err != nil || page.NextBefore == 0 {
		t.Fatalf("page of 2: next %d, %v", page.NextBefore, err)
	}
	rest, err := admin.ListDeadLetters(ctx, b.op, admin.DeadLetterFilter{Limit: 2, Before: page.NextBefore})
	if err != nil || len(rest.DeadLetters) != 1 || rest.NextBefore != 0 {
		t.Fatalf("second page: %+v, %v", rest, err)
	}

	id := b.jobID(t, s1, "billing")
	j, err := admin.GetJob(ctx, b.op, id)
	if err != nil {
		t.Fatal(err)
	}
	if j.ID != id || j.Status != "dead_letter" || *j.LastError != "upstream said no" || len(j.Attempts) != 3 ||
		j.Event.ID != s1 || j.Event.ExternalEventID != "evt_1" || j.Event.Provider != "stripe" || j.Event.BodySize != 2 {
		t.Fatalf("job detail = %+v", j)
	}
	_, err = admin.GetJob(ctx, b.op, id+1000)
	wantErr(t, err, admin.ErrNotFound)
}

func TestReplayOneJob(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	notes := b.listen(t)
	b.subscribe(t, "billing", "stripe", "*", 3)
	ev := b.insert(t, event{source: "stripe", id: "evt_1", eventType: "invoice.paid", body: []byte("{}")})
	id := b.jobID(t, ev, "billing")
	b.deadLetter(t, id, 3, "http_5xx")
	events := b.snapshot(t, "events")

	res, err := admin.Replay(ctx, b.op, admin.ReplayRequest{JobID: id, DryRun: true})
	if err != nil || res != (admin.ReplayResult{DryRun: true, Requeued: 1}) {
		t.Fatalf("dry run: %+v, %v", res, err)
	}
	if j := b.job(t, id); j.Status != "dead_letter" {
		t.Fatalf("dry run changed the job: %+v", j)
	}
	select {
	case <-notes:
		t.Fatal("a dry run sent a NOTIFY")
	case <-time.After(100 * time.Millisecond):
	}

	res, err = admin.Replay(ctx, b.op, admin.ReplayRequest{JobID: id})
	if err != nil || res != (admin.ReplayResult{Requeued: 1}) {
		t.Fatalf("replay: %+v, %v", res, err)
	}
	j := b.job(t, id)
	if j.Status != "pending" || j.AttemptCount != 0 || j.Lease != nil || j.Worker != nil || j.LastError != nil || !j.Due {
		t.Fatalf("replayed job = %+v", j)
	}
	// The history stays, and the replay is in it.
	d, err := admin.GetJob(ctx, b.op, id)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Attempts) != 4 || d.Attempts[2].Outcome != "dead_letter" {
		t.Fatalf("attempts = %+v", d.Attempts)
	}
	marker := d.Attempts[3]
	if marker.Outcome != "replayed" || marker.Attempt != 3 || marker.WorkerID == nil || *marker.WorkerID == "" || marker.ErrorClass != nil {
		t.Fatalf("replay marker = %+v", marker)
	}
	select {
	case <-notes:
	case <-time.After(5 * time.Second):
		t.Fatal("no NOTIFY after the replay")
	}
	if b.snapshot(t, "events") != events {
		t.Fatal("replay changed events")
	}

	// In flight: refused. Unknown: not found.
	b.exec(t, `UPDATE webhook_ingress.jobs SET status = 'leased', lease_holder_id = 's1', lease_expires_at = now() + interval '1 minute', attempt_count = 1 WHERE id = $1`, id)
	_, err = admin.Replay(ctx, b.op, admin.ReplayRequest{JobID: id})
	wantErr(t, err, admin.ErrConflict)
	if j := b.job(t, id); j.Status != "leased" {
		t.Fatalf("leased job was touched: %+v", j)
	}
	_, err = admin.Replay(ctx, b.op, admin.ReplayRequest{JobID: id + 1000})
	wantErr(t, err, admin.ErrNotFound)
}

func TestReplayDeadLettersOfAHandler(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.subscribe(t, "billing", "stripe", "*", 2)
	b.subscribe(t, "audit", "stripe", "*", 2)
	// More than one batch of them.
	const n = 1234
	b.exec(t, `INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, event_type, raw_body, signature_verified)
		SELECT 'stripe', 'stripe', 'evt_' || i, 'invoice.paid', '{}', true FROM generate_series(1, $1) AS i`, n)
	b.exec(t, `UPDATE webhook_ingress.jobs SET status = 'dead_letter', attempt_count = 2, last_error_class = 'http_5xx', last_error = 'no'`)
	// One billing job completed, one in flight: neither is a dead letter.
	b.exec(t, `UPDATE webhook_ingress.jobs SET status = 'completed', completed_at = now() WHERE handler = 'billing' AND id = (SELECT min(id) FROM webhook_ingress.jobs WHERE handler = 'billing')`)
	b.exec(t, `UPDATE webhook_ingress.jobs SET status = 'leased', lease_holder_id = 's', lease_expires_at = now() + interval '1 minute' WHERE handler = 'billing' AND id = (SELECT max(id) FROM webhook_ingress.jobs WHERE handler = 'billing')`)
	events, attempts := b.snapshot(t, "events"), b.snapshot(t, "job_attempts")

	res, err := admin.Replay(ctx, b.op, admin.ReplayRequest{Handler: "billing", DeadLetters: true, DryRun: true})
	if err != nil || res != (admin.ReplayResult{DryRun: true, Requeued: n - 2}) {
		t.Fatalf("dry run: %+v, %v", res, err)
	}
	_, err = admin.Replay(ctx, b.op, admin.ReplayRequest{Handler: "billing", DeadLetters: true, MaxJobs: 1000})
	wantErr(t, err, admin.ErrConflict)
	if b.snapshot(t, "job_attempts") != attempts || b.count(t, `SELECT count(*) FROM webhook_ingress.jobs WHERE status = 'pending'`) != 0 {
		t.Fatal("a refused replay changed something")
	}

	res, err = admin.Replay(ctx, b.op, admin.ReplayRequest{Handler: "billing", DeadLetters: true})
	if err != nil || res != (admin.ReplayResult{Requeued: n - 2}) {
		t.Fatalf("replay: %+v, %v", res, err)
	}
	counts := func(handler string) string {
		rows, err := b.super.Query(ctx, `SELECT status, count(*) FROM webhook_ingress.jobs WHERE handler = $1 GROUP BY 1 ORDER BY 1`, handler)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		s := ""
		for rows.Next() {
			var st string
			var c int
			_ = rows.Scan(&st, &c)
			s += fmt.Sprintf("%s=%d ", st, c)
		}
		return s
	}
	if got, want := counts("billing"), fmt.Sprintf("completed=1 leased=1 pending=%d ", n-2); got != want {
		t.Fatalf("billing jobs: %s, want %s", got, want)
	}
	if got, want := counts("audit"), fmt.Sprintf("dead_letter=%d ", n); got != want {
		t.Fatalf("audit jobs: %s, want %s (another handler's dead letters were touched)", got, want)
	}
	if got := b.count(t, `SELECT count(*) FROM webhook_ingress.job_attempts WHERE outcome = 'replayed' AND attempt = 2`); got != n-2 {
		t.Fatalf("%d replay markers, want %d", got, n-2)
	}
	if got := b.count(t, `SELECT count(*) FROM webhook_ingress.jobs WHERE status = 'pending' AND (attempt_count <> 0 OR last_error IS NOT NULL OR next_attempt_at > now())`); got != 0 {
		t.Fatalf("%d replayed jobs not reset", got)
	}
	if b.snapshot(t, "events") != events {
		t.Fatal("replay changed events")
	}
	// Nothing left to replay; an unknown handler is an error.
	res, err = admin.Replay(ctx, b.op, admin.ReplayRequest{Handler: "billing", DeadLetters: true})
	if err != nil || res.Touched() != 0 {
		t.Fatalf("second replay: %+v, %v", res, err)
	}
	_, err = admin.Replay(ctx, b.op, admin.ReplayRequest{Handler: "nobody", DeadLetters: true})
	wantErr(t, err, admin.ErrNotFound)
}

func TestReplayFilterToANewHandler(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.subscribe(t, "billing", "stripe", "*", 5)
	old := time.Now().Add(-48 * time.Hour)
	ids := map[string]int64{}
	for _, e := range []event{
		{source: "stripe", id: "evt_old", eventType: "invoice.paid", receivedAt: old},
		{source: "stripe", id: "evt_1", eventType: "invoice.paid"},
		{source: "stripe", id: "evt_2", eventType: "invoice.payment_failed"},
		{source: "stripe", id: "evt_3", eventType: "customer.created"},
		{source: "github", id: "gh_1", eventType: "invoice.paid"},
	} {
		e.body = []byte("{}")
		ids[e.id] = b.insert(t, e)
	}
	// "late" subscribes after the events arrived, to stripe invoices only,
	// with two overlapping patterns: the larger max_attempts wins, as at
	// fan-out.
	b.subscribe(t, "late", "stripe", "invoice.*", 4)
	b.subscribe(t, "late", "str*", "invoice.paid", 7)
	if n := b.count(t, `SELECT count(*) FROM webhook_ingress.jobs WHERE handler = 'late'`); n != 0 {
		t.Fatalf("late already has %d jobs", n)
	}
	jobs, attempts, events := b.snapshot(t, "jobs"), b.snapshot(t, "job_attempts"), b.snapshot(t, "events")

	since := time.Now().Add(-time.Hour)
	req := admin.ReplayRequest{Handler: "late", Provider: "stripe", EventType: "*", Since: since, DryRun: true}
	res, err := admin.Replay(ctx, b.op, req)
	if err != nil || res != (admin.ReplayResult{DryRun: true, Created: 2}) {
		t.Fatalf("dry run: %+v, %v", res, err)
	}
	if b.snapshot(t, "jobs") != jobs || b.snapshot(t, "job_attempts") != attempts {
		t.Fatal("dry run changed jobs or attempts")
	}

	req.DryRun = false
	res, err = admin.Replay(ctx, b.op, req)
	if err != nil || res != (admin.ReplayResult{Created: 2}) {
		t.Fatalf("replay: %+v, %v", res, err)
	}
	rows, err := b.super.Query(ctx, `SELECT e.external_event_id, j.status, j.max_attempts, j.attempt_count, j.provider, j.event_type
		FROM webhook_ingress.jobs j JOIN webhook_ingress.events e ON e.id = j.event_id WHERE j.handler = 'late' ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for rows.Next() {
		var ext, status, prov, typ string
		var maxA, count int
		_ = rows.Scan(&ext, &status, &maxA, &count, &prov, &typ)
		got = append(got, fmt.Sprintf("%s:%s:%d:%d:%s:%s", ext, status, maxA, count, prov, typ))
	}
	rows.Close()
	// Not evt_old (before since), not customer.created (not subscribed),
	// not github (filtered out, and not subscribed).
	if want := "[evt_1:pending:7:0:stripe:invoice.paid evt_2:pending:4:0:stripe:invoice.payment_failed]"; fmt.Sprint(got) != want {
		t.Fatalf("late's jobs = %v, want %s", got, want)
	}
	if n := b.count(t, `SELECT count(*) FROM webhook_ingress.job_attempts a JOIN webhook_ingress.jobs j ON j.id = a.job_id
		WHERE j.handler = 'late' AND a.outcome = 'replayed' AND a.attempt = 0`); n != 2 {
		t.Fatalf("%d replay markers on created jobs, want 2", n)
	}

	// Again: now the jobs exist, and are re-queued instead; one of them is
	// in flight and left alone.
	success := b.complete(t, b.jobID(t, ids["evt_1"], "late"), 1, "c1")
	b.exec(t, `UPDATE webhook_ingress.jobs SET status = 'leased', attempt_count = 1, attempted_at = now(), lease_holder_id = 's', lease_expires_at = now() + interval '1 minute' WHERE handler = 'late' AND event_id = $1`, ids["evt_2"])
	res, err = admin.Replay(ctx, b.op, admin.ReplayRequest{Handler: "late", EventType: "invoice.*", Since: since})
	if err != nil || res != (admin.ReplayResult{Requeued: 1, SkippedLeased: 1}) {
		t.Fatalf("second replay: %+v, %v", res, err)
	}
	if j := b.job(t, b.jobID(t, ids["evt_1"], "late")); j.Status != "pending" || j.AttemptCount != 0 {
		t.Fatalf("re-queued job = %+v", j)
	}
	if n := b.count(t, `SELECT count(*) FROM webhook_ingress.job_attempts WHERE id = $1 AND outcome = 'completed' AND worker_id = 'c1'`, success); n != 1 {
		t.Fatalf("the re-queued job's success was not archived (%d rows)", n)
	}
	if j := b.job(t, b.jobID(t, ids["evt_2"], "late")); j.Status != "leased" {
		t.Fatalf("leased job = %+v", j)
	}
	// Billing's jobs were never touched.
	if n := b.count(t, `SELECT count(*) FROM webhook_ingress.jobs WHERE handler = 'billing' AND status <> 'pending'`); n != 0 {
		t.Fatalf("%d billing jobs touched", n)
	}
	if b.snapshot(t, "events") != events {
		t.Fatal("replay changed events")
	}

	// The whole history, to a handler with existing jobs only, is asked for
	// explicitly; a handler nobody knows is not found.
	res, err = admin.Replay(ctx, b.op, admin.ReplayRequest{Handler: "billing", EventType: "*", DryRun: true})
	if err != nil || res != (admin.ReplayResult{DryRun: true, Requeued: 4}) {
		t.Fatalf("billing, everything: %+v, %v", res, err)
	}
	_, err = admin.Replay(ctx, b.op, admin.ReplayRequest{Handler: "ghost", EventType: "*"})
	wantErr(t, err, admin.ErrNotFound)
}

func TestReplayRequestValidation(t *testing.T) {
	t.Parallel()
	b := setup(t)
	now := time.Now()
	for _, req := range []admin.ReplayRequest{
		{},
		{JobID: -1},
		{JobID: 1, Handler: "x"},
		{JobID: 1, DeadLetters: true},
		{JobID: 1, Since: now},
		{Handler: "x"}, // no filter: would replay everything
		{Handler: "x", DeadLetters: true, Provider: "s"}, // dead letters take no filter
		{Handler: "x", Since: now, Until: now.Add(-time.Hour)},
		{Handler: "x", EventType: "*", MaxJobs: -1},
	} {
		_, err := admin.Replay(context.Background(), b.op, req)
		if err == nil {
			t.Errorf("Replay(%+v): no error", req)
			continue
		}
		wantErr(t, err, admin.ErrInvalid)
	}
}

// A success is kept on the job row; a replay archives it into job_attempts
// under the id it had before resetting the row, so after the replay and a
// second success both successes are in the history, each once, and the
// archived one is exactly what the history showed before.
func TestReplayArchivesTheSuccessfulAttempt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.subscribe(t, "billing", "stripe", "*", 3)
	ev := b.insert(t, event{source: "stripe", id: "evt_1", eventType: "invoice.paid", body: []byte("{}")})
	id := b.jobID(t, ev, "billing")
	b.exec(t, `INSERT INTO webhook_ingress.job_attempts (job_id, event_received_at, attempt, worker_id, started_at, outcome, error_class, error)
		SELECT id, event_received_at, 1, 'c1', now() - interval '3 seconds', 'failed', 'timeout', 'slow' FROM webhook_ingress.jobs WHERE id = $1`, id)
	first := b.complete(t, id, 2, "c2")

	history := func() []admin.Attempt {
		t.Helper()
		d, err := admin.GetJob(ctx, b.op, id)
		if err != nil {
			t.Fatal(err)
		}
		return d.Attempts
	}
	outcomes := func(as []admin.Attempt) string {
		var s []string
		for _, a := range as {
			w := "-"
			if a.WorkerID != nil {
				w = *a.WorkerID
			}
			s = append(s, fmt.Sprintf("%s:%d:%s", a.Outcome, a.Attempt, w))
		}
		return fmt.Sprint(s)
	}
	before := history()
	if got, want := outcomes(before), "[failed:1:c1 completed:2:c2]"; got != want {
		t.Fatalf("history before the replay %s, want %s", got, want)
	}
	if before[1].ID != first {
		t.Fatalf("the success shows id %d, want the job's completed_attempt_id %d", before[1].ID, first)
	}

	if res, err := admin.Replay(ctx, b.op, admin.ReplayRequest{JobID: id}); err != nil || res.Requeued != 1 {
		t.Fatalf("replay: %+v, %v", res, err)
	}
	var cleared bool
	if err := b.super.QueryRow(ctx, `SELECT status = 'pending' AND completed_attempt_id IS NULL AND completed_at IS NULL
		AND worker_id IS NULL AND attempt_count = 0 FROM webhook_ingress.jobs WHERE id = $1`, id).Scan(&cleared); err != nil || !cleared {
		t.Fatalf("replayed job not reset (%v)", err)
	}
	after := history()
	if got, want := outcomes(after), "[failed:1:c1 completed:2:c2 replayed:2:"+*after[len(after)-1].WorkerID+"]"; got != want {
		t.Fatalf("history after the replay %s, want %s", got, want)
	}
	// Archived as it was shown: same id, consumer, times and duration; now a
	// job_attempts row.
	if a, w := after[1], before[1]; a.ID != w.ID || !a.StartedAt.Equal(w.StartedAt) || !a.FinishedAt.Equal(w.FinishedAt) ||
		a.DurationMS != w.DurationMS || *a.WorkerID != *w.WorkerID || a.Attempt != w.Attempt {
		t.Fatalf("archived success %+v, was %+v", a, w)
	}
	if n := b.count(t, `SELECT count(*) FROM webhook_ingress.job_attempts WHERE id = $1 AND job_id = $2 AND outcome = 'completed'`, first, id); n != 1 {
		t.Fatalf("%d job_attempts rows with the success's id, want 1", n)
	}
	if after[2].ID <= first {
		t.Fatalf("replay marker id %d not after the archived success's %d", after[2].ID, first)
	}

	// The second run succeeds at once: both successes are in the history,
	// each once, under distinct ids.
	second := b.complete(t, id, 1, "c3")
	got := history()
	if want := "[failed:1:c1 completed:2:c2 replayed:2:" + *after[2].WorkerID + " completed:1:c3]"; outcomes(got) != want {
		t.Fatalf("history after the second success %s, want %s", outcomes(got), want)
	}
	if got[3].ID != second || second <= after[2].ID {
		t.Fatalf("second success id %d (history %d), want it after the marker %d", second, got[3].ID, after[2].ID)
	}

	// Replayed again: the second success is archived too; the first stays.
	if _, err := admin.Replay(ctx, b.op, admin.ReplayRequest{JobID: id}); err != nil {
		t.Fatal(err)
	}
	if n := b.count(t, `SELECT count(*) FROM webhook_ingress.job_attempts WHERE job_id = $1 AND outcome = 'completed' AND id IN ($2, $3)`, id, first, second); n != 2 {
		t.Fatalf("%d archived successes, want 2", n)
	}
	final := history()
	if got := outcomes(final); !strings.HasPrefix(got, "[failed:1:c1 completed:2:c2 replayed:2:") || !strings.Contains(got, " completed:1:c3 replayed:1:") {
		t.Fatalf("history after the second replay %s", got)
	}
	// Each replay starts a run: the two successes, both attempt 1 of theirs
	// or not, are told apart by it.
	var runs []int
	for _, a := range final {
		runs = append(runs, a.Run)
	}
	if want := []int{1, 1, 2, 2, 3}; !slices.Equal(runs, want) {
		t.Fatalf("runs %v of history %s, want %v", runs, outcomes(final), want)
	}
}

// A job completed by a service of the previous version has its success as a
// job_attempts row and no completed_attempt_id: a replay archives nothing
// more, so the success is not in the history twice.
func TestReplayOfAJobCompletedTheOldWay(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.subscribe(t, "billing", "stripe", "*", 3)
	ev := b.insert(t, event{source: "stripe", id: "evt_1", eventType: "invoice.paid", body: []byte("{}")})
	id := b.jobID(t, ev, "billing")
	b.exec(t, `INSERT INTO webhook_ingress.job_attempts (job_id, event_received_at, attempt, worker_id, started_at, outcome)
		SELECT id, event_received_at, 1, 'old', now() - interval '1 second', 'completed' FROM webhook_ingress.jobs WHERE id = $1`, id)
	b.exec(t, `UPDATE webhook_ingress.jobs SET status = 'completed', attempt_count = 1, completed_at = now(), worker_id = 'old' WHERE id = $1`, id)
	if _, err := admin.Replay(ctx, b.op, admin.ReplayRequest{JobID: id}); err != nil {
		t.Fatal(err)
	}
	d, err := admin.GetJob(ctx, b.op, id)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Attempts) != 2 || d.Attempts[0].Outcome != "completed" || d.Attempts[1].Outcome != "replayed" {
		t.Fatalf("history %+v, want the one success then the replay", d.Attempts)
	}
}

// Catch-up to a handler whose subscription carries a filter creates jobs
// only for the events that pass it, evaluated on the stored bytes as ingress
// does at arrival; the dry run counts the same.
func TestReplayAppliesTheSubscriptionFilter(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	for _, e := range []event{
		{source: "stripe", id: "evt_big", eventType: "charge.succeeded", body: []byte(`{"data":{"object":{"amount":25000}}}`)},
		{source: "stripe", id: "evt_small", eventType: "charge.succeeded", body: []byte(`{"data":{"object":{"amount":500}}}`)},
		{source: "stripe", id: "evt_form", eventType: "charge.succeeded", body: []byte(`amount=25000`)},
		{source: "stripe", id: "evt_refund", eventType: "charge.refunded", body: []byte(`{"data":{"object":{"amount":90000}}}`)},
	} {
		b.insert(t, e)
	}
	b.exec(t, `INSERT INTO webhook_ingress.subscriptions (handler, provider_pattern, event_type_pattern, max_attempts, filter)
		VALUES ('big', 'stripe', 'charge.*', 6, 'payload.data.object.amount > 10000 && event.type == "charge.succeeded"')`)
	req := admin.ReplayRequest{Handler: "big", Provider: "stripe", DryRun: true}
	res, err := admin.Replay(ctx, b.op, req)
	if err != nil || res != (admin.ReplayResult{DryRun: true, Created: 1}) {
		t.Fatalf("dry run: %+v, %v; want 1 job to create", res, err)
	}
	req.DryRun = false
	res, err = admin.Replay(ctx, b.op, req)
	if err != nil || res != (admin.ReplayResult{Created: 1}) {
		t.Fatalf("replay: %+v, %v; want 1 job created", res, err)
	}
	var got string
	if err := b.super.QueryRow(ctx, `SELECT string_agg(e.external_event_id || ':' || j.max_attempts, ',')
		FROM webhook_ingress.jobs j JOIN webhook_ingress.events e ON e.id = j.event_id WHERE j.handler = 'big'`).Scan(&got); err != nil {
		t.Fatal(err)
	}
	if got != "evt_big:6" {
		t.Fatalf("big's jobs: %s, want evt_big:6", got)
	}
	// A filter that does not compile fails the replay, naming it.
	b.exec(t, `UPDATE webhook_ingress.subscriptions SET filter = 'payload.amount >' WHERE handler = 'big'`)
	_, err = admin.Replay(ctx, b.op, admin.ReplayRequest{Handler: "big", Provider: "stripe", DryRun: true})
	wantErr(t, err, admin.ErrInvalid)
}

// An event that both an unfiltered and a filtered subscription of the handler
// match gets one job from a replay, with the larger max_attempts, and its
// plan counts one: the dry run says 1, and max_jobs 1 lets the replay run.
// The same for an unrouted catch-up.
func TestReplayPlanCountsAJobOfTwoMatchingSubscriptionsOnce(t *testing.T) {
	t.Parallel()
	for _, unrouted := range []bool{false, true} {
		t.Run(fmt.Sprintf("unrouted=%v", unrouted), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			ctx := context.Background()
			b.insert(t, event{source: "stripe", id: "evt_1", eventType: "charge.succeeded", body: []byte(`{"amount":25000}`)})
			if _, err := admin.EventTypes(ctx, b.op, 100); err != nil { // folds it as unrouted
				t.Fatal(err)
			}
			b.subscribe(t, "late", "stripe", "invoice.*", 3)
			b.exec(t, `INSERT INTO webhook_ingress.subscriptions (handler, provider_pattern, event_type_pattern, max_attempts, filter)
				VALUES ('late', 'stripe', 'charge.*', 5, 'payload.amount > 10000'), ('late', 'stripe', '*', 3, NULL)`)
			req := admin.ReplayRequest{Handler: "late", Provider: "stripe", Since: time.Now().Add(-time.Hour), DryRun: true}
			if unrouted {
				req = admin.ReplayRequest{Handler: "late", Provider: "stripe", Unrouted: true, DryRun: true}
			}
			res, err := admin.Replay(ctx, b.op, req)
			if err != nil || res != (admin.ReplayResult{DryRun: true, Created: 1}) {
				t.Fatalf("dry run: %+v, %v; want 1 job to create", res, err)
			}
			req.DryRun, req.MaxJobs = false, 1
			res, err = admin.Replay(ctx, b.op, req)
			if err != nil || res != (admin.ReplayResult{Created: 1}) {
				t.Fatalf("replay with max_jobs 1: %+v, %v; want 1 job created", res, err)
			}
			if n := b.count(t, `SELECT count(*) FROM webhook_ingress.jobs WHERE handler = 'late'`); n != 1 {
				t.Fatalf("late has %d jobs, want 1", n)
			}
			// Its settings are the largest of both subscriptions', as at
			// fan-out (review helper-140: the unfiltered one's job was
			// created first, and the filtered one's 5 attempts lost).
			if n := b.count(t, `SELECT max_attempts FROM webhook_ingress.jobs WHERE handler = 'late'`); n != 5 {
				t.Fatalf("late's job has max_attempts %d, want 5 (filtered 5, unfiltered 3)", n)
			}
		})
	}
}

// Run numbering at the edges: a job created by a replay opens its history
// with a marker of attempt 0, which is its first run; a dead letter whose
// earlier attempts are not in the history (the marker says it had 3) is
// replayed into run 2.
func TestAttemptRunsOfCreatedAndBareJobs(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	ev := b.insert(t, event{source: "stripe", id: "evt_1", eventType: "invoice.paid", body: []byte("{}")})
	b.subscribe(t, "late", "stripe", "*", 3)
	if res, err := admin.Replay(ctx, b.op, admin.ReplayRequest{Handler: "late", Provider: "stripe", EventType: "*", Since: time.Now().Add(-time.Hour)}); err != nil || res.Created != 1 {
		t.Fatalf("create: %+v, %v", res, err)
	}
	created := b.jobID(t, ev, "late")
	b.complete(t, created, 1, "c1")
	runs := func(id int64) string {
		t.Helper()
		d, err := admin.GetJob(ctx, b.op, id)
		if err != nil {
			t.Fatal(err)
		}
		var s []string
		for _, a := range d.Attempts {
			s = append(s, fmt.Sprintf("%s:%d/%d", a.Outcome, a.Run, a.Attempt))
		}
		return strings.Join(s, " ")
	}
	if got, want := runs(created), "replayed:1/0 completed:1/1"; got != want {
		t.Errorf("created job: %s, want %s", got, want)
	}

	b.subscribe(t, "billing", "stripe", "*", 3)
	ev2 := b.insert(t, event{source: "stripe", id: "evt_2", eventType: "invoice.paid", body: []byte("{}")})
	bare := b.jobID(t, ev2, "billing")
	b.exec(t, `UPDATE webhook_ingress.jobs SET status = 'dead_letter', attempt_count = 3, updated_at = now() WHERE id = $1`, bare)
	if _, err := admin.Replay(ctx, b.op, admin.ReplayRequest{JobID: bare}); err != nil {
		t.Fatal(err)
	}
	if got, want := runs(bare), "replayed:2/3"; got != want {
		t.Errorf("bare dead letter: %s, want %s", got, want)
	}
}

// Jobs a replay creates for an ordered handler (unrouted and missing jobs,
// and a filtered handler's catch-up) get their key and time as the fan-outs give them, so
// they queue in their key's lane (order_lanes) rather than the keyless one.
func TestReplayGivesAnOrderedHandlersNewJobsTheirKeys(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	old := time.Now().Add(-2 * time.Hour).Truncate(time.Microsecond)
	for i, e := range []event{
		{source: "stripe", id: "evt_a1", eventType: "invoice.paid", headers: http.Header{"X-Entity": {"cus_a"}}},
		{source: "stripe", id: "evt_a2", eventType: "invoice.paid", headers: http.Header{"X-Entity": {"cus_a"}}},
		{source: "stripe", id: "evt_b1", eventType: "invoice.paid", headers: http.Header{"X-Entity": {"cus_b"}}},
		{source: "stripe", id: "evt_none", eventType: "invoice.paid"},
	} {
		e.body = []byte(`{"amount":` + fmt.Sprint(20000+i) + `}`)
		e.receivedAt = old.Add(time.Duration(i) * time.Minute)
		b.insert(t, e)
	}
	// Nothing routes the events yet: they are unrouted (folded by EventTypes).
	if _, err := admin.EventTypes(ctx, b.op, 100); err != nil {
		t.Fatal(err)
	}
	b.exec(t, `INSERT INTO webhook_ingress.subscriptions (handler, provider_pattern, event_type_pattern, max_attempts, order_key)
		VALUES ('ordered_unrouted', 'stripe', '*', 5, 'header:X-Entity'), ('ordered', 'stripe', '*', 5, 'header:X-Entity')`)
	b.exec(t, `INSERT INTO webhook_ingress.subscriptions (handler, provider_pattern, event_type_pattern, max_attempts, order_key, filter)
		VALUES ('ordered_big', 'stripe', '*', 5, 'header:X-Entity', 'event.type == "invoice.paid"')`)
	for _, h := range []string{"ordered_unrouted", "ordered", "ordered_big"} {
		req := admin.ReplayRequest{Handler: h, Provider: "stripe", EventType: "*"}
		if h == "ordered_unrouted" { // first, while no job routes them
			req = admin.ReplayRequest{Handler: h, Provider: "stripe", Unrouted: true}
		}
		res, err := admin.Replay(ctx, b.op, req)
		if err != nil || res.Created != 4 {
			t.Fatalf("replay %s: %+v, %v; want 4 jobs created", h, res, err)
		}
		var got string
		if err := b.super.QueryRow(ctx, `SELECT string_agg(e.external_event_id || ':' || coalesce(j.order_key, '-') || ':' ||
				coalesce((j.order_at = e.received_at)::text, '-') || ':' || (l.job_id IS NOT NULL)::text, ' ' ORDER BY e.external_event_id)
			FROM webhook_ingress.jobs j JOIN webhook_ingress.events e ON e.id = j.event_id
			LEFT JOIN webhook_ingress.order_lanes l ON l.job_id = j.id
			WHERE j.handler = $1`, h).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if want := "evt_a1:cus_a:true:true evt_a2:cus_a:true:true evt_b1:cus_b:true:true evt_none:-:-:false"; got != want {
			t.Fatalf("%s's jobs (event:key:ordered by arrival:in a lane) = %s, want %s", h, got, want)
		}
	}
}
