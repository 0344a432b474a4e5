package retention_test

import (
	"strings"
	"testing"

	"github.com/inlet-dev/inlet/retention"
)

// TestSurvivor254_DryRunKeepsAnUnsealedPartition guards retention's rule
// that a period is dropped only once every one of its events is sealed by
// an audit checkpoint (retention.go package doc), as a dry run reports it:
// `inlet retention --dry-run` says what a real run would do, so an old,
// finished but unsealed partition is "kept: events not sealed yet", never
// "would drop".
//
// Mutant (helper-254): retention/retention.go:418, in expire,
// `case part.MaxEventID > part.SealedThrough:` changed to `case false &&
// part.MaxEventID > part.SealedThrough:`. A real run stays safe
// (drop_partition re-checks the seal and raises object_in_use, reported as
// kept), so every existing test passed; but no test dry-runs before the
// seal, and with the mutant the dry run answers would_drop for a period the
// real run then keeps: an operator checking what retention will remove is
// told the unsealed events will go.
func TestSurvivor254_DryRunKeepsAnUnsealedPartition(t *testing.T) {
	t.Parallel()
	b := setup(t)
	old := b.event(t, "evt_unsealed", 60*day)
	b.finish(t, old, "completed")
	part := partitionOf(t, b, old)

	dry := run(t, b.pool, retention.Options{MaxAge: 30 * day, DryRun: true})
	p, ok := verdicts(dry)[part]
	if !ok || p.Verdict != retention.Kept || !strings.Contains(p.Reason, "not sealed") {
		t.Errorf("dry run over unsealed %s: %+v (listed %v), want kept for events not sealed yet", part, p, ok)
	}
	live := run(t, b.pool, retention.Options{MaxAge: 30 * day})
	if p := verdicts(live)[part]; p.Verdict != retention.Kept {
		t.Errorf("run over unsealed %s: %+v, want kept", part, p)
	}
	if n := b.count(t, `SELECT count(*) FROM webhook_ingress.events WHERE id = $1`, old); n != 1 {
		t.Errorf("the unsealed event is gone (%d rows)", n)
	}
}
