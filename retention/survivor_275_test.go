package retention_test

import (
	"testing"

	"github.com/inlet-dev/inlet/retention"
)

// TestSurvivor275_FailedJobAwaitingRetryKeepsItsPartition (mutation tester
// helper-275). Guarantee: a partition one of whose jobs is not finished
// (pending, leased, or failed: a failure waiting for its next attempt) is
// kept, and a dry run says so (Kept, with OpenJobs counted) instead of
// promising a drop the real run would then refuse.
// Mutant: schema/migrations/010_lease_token.up.sql:80 (the latest
// definition of webhook_ingress.partition_status), the open-jobs count
// `status IN ('pending', 'leased', 'failed')` -> `status IN ('pending',
// 'leased')`: the dry run then reported the partition would_drop with 0
// open jobs (drop_partition's own EXISTS re-check, 044, still refused the
// real drop, so only the report lied). The same change to the fallback
// count of schema/queries/retention.sql:55 (RetentionPeriodStatus, used
// for partitions the role does not own) is not caught by this test.
// Why existing tests missed it: the open-job cases in retention_test.go and
// tests/retention_test.go use a pending job only, never a failed one.
func TestSurvivor275_FailedJobAwaitingRetryKeepsItsPartition(t *testing.T) {
	t.Parallel()
	b := setup(t)
	retrying := b.event(t, "evt_s275_retry", 45*day)
	b.finish(t, retrying, "failed") // one failed attempt, the next one due later
	part := partitionOf(t, b, retrying)
	b.seal(t)

	dry := run(t, b.pool, retention.Options{MaxAge: 30 * day, DryRun: true})
	if p := verdicts(dry)[part]; p.Verdict != retention.Kept || p.OpenJobs != 1 {
		t.Fatalf("dry run, %s with a failed job awaiting its retry: %+v, want kept with 1 open job", part, p)
	}
	rep := run(t, b.pool, retention.Options{MaxAge: 30 * day})
	if p := verdicts(rep)[part]; p.Verdict != retention.Kept || p.OpenJobs != 1 {
		t.Fatalf("%s with a failed job awaiting its retry: %+v, want kept with 1 open job", part, p)
	}
	if n := b.count(t, `SELECT count(*) FROM webhook_ingress.events WHERE id = $1`, retrying); n != 1 {
		t.Fatalf("the event of a job awaiting its retry is gone (%d rows)", n)
	}
}
