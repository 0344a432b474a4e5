package retention_test

import (
	"testing"

	"github.com/inlet-dev/inlet/retention"
)

// TestSurvivor268_DryRunCreatesNoPartition (mutation tester helper-268).
// Guarantee: a retention dry run "reports what would be created and
// dropped and changes nothing" (Options.DryRun; inlet retention --dry-run:
// "report what would be created and dropped; change nothing"): the
// partitions it would create ahead are listed in Created, not created.
// Mutant: retention/retention.go:248, in Run: `if !opts.DryRun {` ->
// `if !opts.DryRun || true {` (EnsurePartitions runs on a dry run too; the
// report still lists the same periods, from wouldCreate).
// Why existing tests missed it: the dry-run checks (retention_test.go,
// tests/retention_test.go) count events that must not be dropped, never the
// partitions that must not be created.
func TestSurvivor268_DryRunCreatesNoPartition(t *testing.T) {
	t.Parallel()
	b := setup(t) // weekly partitions through two weeks ahead
	const parts = `SELECT count(*) FROM webhook_ingress.partitions()`
	before := b.count(t, parts)
	dry := run(t, b.pool, retention.Options{Interval: "week", Ahead: 8, DryRun: true})
	if !dry.DryRun || len(dry.Created) == 0 {
		t.Fatalf("dry run 8 weeks ahead: %+v, want it to say it would create partitions", dry)
	}
	if after := b.count(t, parts); after != before {
		t.Fatalf("the dry run changed the partitions: %d before, %d after (it said it would create %d)", before, after, len(dry.Created))
	}
	// Control: the same run, not dry, creates them.
	wet := run(t, b.pool, retention.Options{Interval: "week", Ahead: 8})
	if after := b.count(t, parts); len(wet.Created) == 0 || after != before+int64(len(wet.Created)) {
		t.Fatalf("the run created %d partitions: %d before, %d after", len(wet.Created), before, after)
	}
}
