package audit

import (
	"context"
	"strings"
	"testing"
)

// TestADuplicateUnsealedIDIsReportedAndNotSealed proves that a second row
// with an id past the last checkpoint (the owner's INSERT … OVERRIDING SYSTEM
// VALUE with another received_at; the key is (id, received_at)) is neither
// reported by verify nor handled by the sealer: verify says intact, and every
// seal pass from then on fails with a bare check-constraint violation, so
// nothing is ever sealed again (and inlet retention, which drops only sealed
// periods, never drops anything again).
//
// Regression test (review helper-96; fixed: the text describes the behaviour
// before the fix). Verify: audit/verify.go run(), the loop past the last
// checkpoint, reports a second row only when its id is <= SealedThrough; two
// rows with one unsealed id are both counted as "unsealed" and the report is
// OK, although an identity id can never legitimately appear twice.
//
// Sealer: audit/sealer.go nextCheckpoint() appends a leaf for
// every row it reads; for the second row of an id, the `for ; expect < e.ID`
// loop does nothing and add(eventLeaf(e)) adds a second leaf for the same id,
// so the checkpoint has one more leaf than ids and its INSERT violates
// audit_checkpoints_leaf_count. The pass fails with that constraint's name
// (no event id, nothing saying the log was tampered), and so does every
// later pass.
//
// Expected: verify reports an out_of_order_event for the second row with id
// 4 (as it does when the id is sealed), and the sealer either refuses with an
// error naming event id 4 as a second row (tampering) or seals one leaf per
// id (so verify then reports the other row as out of order) rather than
// failing on a constraint violation.
func TestADuplicateUnsealedIDIsReportedAndNotSealed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, Config{MaxLeaves: 10})
	for range 3 {
		b.insert(t, ctx)
	}
	if cps := b.seal(t); len(cps) != 1 || cps[0].LastEventID != 3 {
		t.Fatalf("sealed %+v, want ids 1..3", cps)
	}
	b.insert(t, ctx)                    // id 4, not sealed yet
	b.forgeDuplicate(t, 4, "-1 second") // a second row with id 4

	rep := b.verify(t, VerifyOptions{})
	verifyOK := rep.OK

	_, sealErr := b.sealer.Seal(ctx)

	var fails []string
	if verifyOK {
		fails = append(fails, "verify reports intact (Events "+itoa(rep.Events)+", Unsealed "+itoa(rep.Unsealed)+
			") although two rows carry event id 4; want out_of_order_event 4")
	}
	if sealErr != nil && strings.Contains(sealErr.Error(), "audit_checkpoints_leaf_count") {
		fails = append(fails, "seal: "+sealErr.Error()+"; want an error naming event id 4 as a second row, or a checkpoint "+
			"sealing the original (the sealer is wedged: every later pass fails the same way)")
	}
	if len(fails) > 0 {
		t.Fatal(strings.Join(fails, "\n"))
	}
}
