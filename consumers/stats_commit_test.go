package consumers_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/consumers"
	"github.com/inlet-dev/inlet/consumers/internal/consumertest"
)

// Stats.Completed counts successes recorded. For a TxFunc handler the
// CompleteJobs statement runs inside the handler's transaction, so its
// completion counts only once that transaction commits: when the COMMIT
// fails (here a deferred constraint the handler's write violates), nothing
// was completed and the attempt is recorded as failed (class transaction).
// (Found by a review: it was counted before the commit.)
func TestStatsDoNotCountACompletionWhoseCommitFailed(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	if _, err := b.Admin.Exec(ctx, `
CREATE TABLE public.review_parent (id bigint PRIMARY KEY);
CREATE TABLE public.review_child (parent bigint NOT NULL REFERENCES public.review_parent (id) DEFERRABLE INITIALLY DEFERRED);
GRANT SELECT, INSERT ON public.review_parent, public.review_child TO webhook_worker`); err != nil {
		t.Fatal(err)
	}
	svc := b.start(t, b.config(consumers.Handler{Name: "ledger", MaxAttempts: 1,
		TxFunc: func(ctx context.Context, tx pgx.Tx, e *consumers.Event) error {
			// A row whose foreign key is checked only at COMMIT, and fails there.
			_, err := tx.Exec(ctx, `INSERT INTO public.review_child (parent) VALUES ($1)`, e.JobID+1_000_000)
			return err
		}}))
	b.StartStreamer(t, consumertest.StreamerOptions{})
	jobID := b.JobID(t, b.InsertEvent(t, consumertest.EventParams{}), "ledger")
	j := b.WaitJobStatus(t, jobID, "dead_letter", wait)
	if deref(j.LastErrorClass) != string(consumers.ClassTransaction) {
		t.Fatalf("job %+v, want dead-lettered with class transaction (its commit failed)", j)
	}
	if st := svc.Stats(); st.Completed != 0 {
		t.Fatalf("Stats after the only attempt's commit failed (job dead-lettered, nothing completed): %+v, want Completed 0", st)
	}
}
