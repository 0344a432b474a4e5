package admin_test

import (
	"context"
	"testing"

	"github.com/inlet-dev/inlet/admin"
)

// A dry run says that the real replay would be refused by max_jobs.
//
// Regression test (review helper-107; fixed: the text describes the
// behaviour before the fix). A dry run did not say that the real replay
// would be refused by max_jobs. inlet replay --help: "--dry-run prints how many jobs
// would be re-queued and created, and changes nothing", and --max-jobs
// "refuse[s] a replay touching more jobs than this". With 3 dead letters and
// --max-jobs 2, `inlet replay --handler billing --dead-letters --max-jobs 2
// --dry-run` prints "dry run: would touch 3 jobs: re-queue 3, create 0;
// nothing changed" (exit 0), and the same command without --dry-run is
// refused (ErrConflict, exit non-zero) and re-queues nothing. The dry run,
// whose purpose is to preview the real run, reports an outcome the real run
// never has; the POST /api/replay dry_run answers 200 with the same counts.
//
// Root cause: admin/replay.go Replay returns the plan for req.DryRun before
// the `plan.Touched() > maxJobs` check, so the limit is never applied to a
// dry run.
// Expected: the dry run answers as the run would: the same ErrConflict
// naming the limit (or a result that says it would be refused).
func TestReplayDryRunIsRefusedOverMaxJobs(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.subscribe(t, "billing", "stripe", "*", 3)
	for _, id := range []string{"evt_dr_1", "evt_dr_2", "evt_dr_3"} {
		ev := b.insert(t, event{source: "stripe", id: id, eventType: "invoice.paid", body: []byte("{}")})
		b.deadLetter(t, b.jobID(t, ev, "billing"), 3, "http_5xx")
	}
	req := admin.ReplayRequest{Handler: "billing", DeadLetters: true, MaxJobs: 2}
	_, runErr := admin.Replay(ctx, b.op, req)
	wantErr(t, runErr, admin.ErrConflict) // the real run is refused
	if n := b.count(t, `SELECT count(*) FROM webhook_ingress.jobs WHERE status = 'dead_letter'`); n != 3 {
		t.Fatalf("the refused run changed jobs: %d dead letters left, want 3", n)
	}

	req.DryRun = true
	res, err := admin.Replay(ctx, b.op, req)
	if err == nil {
		t.Fatalf("dry run with max_jobs 2 answered %+v (would re-queue %d), but the same replay run for real is refused: %v",
			res, res.Requeued, runErr)
	}
	wantErr(t, err, admin.ErrConflict)
}
