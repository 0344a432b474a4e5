package consumers_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/consumers"
	"github.com/inlet-dev/inlet/consumers/internal/consumertest"
)

// TestStaleFailureCannotFailTheNextLeaseWithTheSameAttemptNumber:
// guarantee (docs/pipeline.md, Consumers: "records the outcome on that job
// only, fenced on the token, so a consumer that hung cannot overwrite a
// newer attempt (nor a replayed one, whose attempt numbers start again at
// 1)"; the lease token is (attempt, leased_at)). A consumer that hung on
// attempt 1 and then FAILS, after the job was replayed and leased again as
// a new attempt 1, must not record its failure on the new lease.
//
// Mutant (helper-238): schema/queries/jobs.sql, FailJob (and its copy in
// jobs.sql.go), `AND attempted_at = $7` changed to
// `AND $7::timestamptz IS NOT NULL`: the failure fenced on the attempt
// number alone. The consumers package (all of it, with -race) and the
// schema package passed: TestStaleConsumerCannotFinishTheNextLeaseWithTheSameAttemptNumber
// covers a stale SUCCESS only (CompleteJobs), and every other fencing test
// of a failure changes the attempt number (a reaped or re-leased job gets
// attempt 2), which the attempt_count condition alone still fences. With
// the mutant the stale failure turns the running attempt 1 into 'failed'
// (its error text, a backoff, a history row): the newer attempt's outcome
// is then fenced out in its turn, and the job runs once more.
func TestStaleFailureCannotFailTheNextLeaseWithTheSameAttemptNumber(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	started, release := make(chan struct{}), make(chan struct{})
	var calls atomic.Int32
	b.start(t, b.config(consumers.Handler{Name: "h", MaxAttempts: 5, Func: func(context.Context, *consumers.Event) error {
		if calls.Add(1) == 1 {
			close(started)
			<-release
			return errors.New("survivor-238: stale attempt failed")
		}
		return nil
	}}))
	jobID := b.JobID(t, b.InsertEvent(t, consumertest.EventParams{EventType: "x"}), "h")
	refs := b.ClaimOnce(t, time.Minute)
	if len(refs) != 1 {
		t.Fatalf("claimed %d", len(refs))
	}
	if err := b.Publish(refs[0]); err != nil {
		t.Fatal(err)
	}
	select {
	case <-started:
	case <-time.After(2 * wait):
		t.Fatal("the handler was not called")
	}
	// Meanwhile: the lease is taken back and the job replayed (attempts
	// reset to 0), then leased again as attempt 1 with a new lease time.
	if _, err := b.Admin.Exec(ctx, `UPDATE webhook_ingress.jobs SET status = 'pending', attempt_count = 0,
		lease_holder_id = NULL, lease_expires_at = NULL, worker_id = NULL WHERE id = $1`, jobID); err != nil {
		t.Fatal(err)
	}
	again := b.ClaimOnce(t, time.Minute)
	if len(again) != 1 || again[0].Attempt != 1 || !again[0].LeasedAt.After(refs[0].LeasedAt) {
		t.Fatalf("re-lease: %+v, first lease %+v", again, refs[0])
	}
	close(release)
	consumertest.WaitFor(t, 2*wait, "the stale attempt's outcome to be decided", func() bool {
		logs := b.logs.String()
		return strings.Contains(logs, "attempt outcome not recorded") || strings.Contains(logs, "attempt finished")
	})
	j := b.Job(t, jobID)
	if j.Status != "leased" || j.AttemptCount != 1 || j.LastError != nil {
		t.Fatalf("job %+v: the stale consumer's failure was recorded on the new lease of attempt 1", j)
	}
	var history int
	if err := b.Admin.QueryRow(ctx, `SELECT count(*) FROM webhook_ingress.job_attempts WHERE job_id = $1`, jobID).Scan(&history); err != nil {
		t.Fatal(err)
	}
	if history != 0 {
		t.Fatalf("%d history rows for the job: the stale failure was recorded", history)
	}
}
