package reporter_test

import (
	"context"
	"testing"

	"github.com/inlet-dev/inlet/internal/database"
)

// TestAnInfiniteTimestampDoesNotStopReporting proves that a single job row
// with an infinite completed_at (which webhook_worker, and so any consumer
// written outside the SDK, may set: 005_partitions grants it
// UPDATE (..., completed_at) and 010 UPDATE (completed_attempt_id)) stops the
// reporter for good: every later attempt of the data plane is never reported.
//
// Regression test (review helper-97; fixed: the text describes the behaviour
// before the fix). ReporterAttemptsAfter (schema/queries/reporter.sql:35-37) computes
// extract(epoch FROM j.completed_at - coalesce(j.attempted_at, ...)), which
// PostgreSQL refuses for an infinite timestamp ("cannot subtract infinite
// timestamps"; on PostgreSQL 17 it yields Infinity and pgx then refuses to scan
// 'infinity' into time.Time). Reporter.run (reporter/reporter.go, the
// r.retry(ctx, "read attempts", ...) loop) retries that same statement from the
// same cursor forever, so the cursor is stuck behind the row. The reporter is
// built so that one bad row never stops it (collect skips and logs invalid
// rows; the query's comment: "so a NULL never stops the reporter"), but an
// infinite time does.
//
// Expected: the bad row is skipped (logged without its values) like any other
// row that is not a valid record, and later attempts are reported.
func TestAnInfiniteTimestampDoesNotStopReporting(t *testing.T) {
	t.Parallel()
	d, cp := newDataPlane(t), newControlPlane(t)
	ctx := context.Background()
	worker, err := database.Open(ctx, d.url, database.Options{Role: "webhook_worker"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(worker.Close)

	bad, good := d.job(t), d.job(t)
	// A consumer outside the SDK, with its own (worker) role, marks a job
	// done with a bogus time.
	if _, err := worker.Exec(ctx, `UPDATE webhook_ingress.jobs
		SET status = 'completed', completed_at = 'infinity', updated_at = now(),
		    completed_attempt_id = nextval('webhook_ingress.job_attempts_id_seq')
		WHERE id = $1`, bad); err != nil {
		t.Fatalf("the worker role cannot write the row (then this is no defect): %v", err)
	}
	d.complete(t, d.super, good, 1)
	startReporter(t, d, cp, nil)
	// The good attempt (and every later one) should be reported; the bad
	// row at most skipped.
	cp.waitStored(t, 1)
}
