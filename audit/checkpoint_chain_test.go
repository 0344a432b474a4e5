package audit

import (
	"context"
	"testing"
	"time"
)

// TestCheckpointHashCoversPrev guards the audit invariant that a
// checkpoint's own hash covers prev_hash, so that the head hash kept outside
// the database pins every earlier checkpoint, not only the newest one.
//
// Mutant that survived every existing test (audit and tests/ -run Audit):
// audit/hash.go:128, in checkpointHash, `b = append(b, c.Prev[:]...)` removed
// (prev_hash no longer hashed). Existing tampering tests alter one
// checkpoint's field and leave its hash stale, which the per-checkpoint hash
// check catches either way; none rewrites an older checkpoint consistently
// (new fields, recomputed hash) and relinks the next one's prev_hash, which
// only the prev-covering hash (checked against the kept head) can expose.
func TestCheckpointHashCoversPrev(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, Config{MaxLeaves: 5})
	for range 10 {
		b.insert(t, ctx)
	}
	cps := b.seal(t)
	if len(cps) != 2 {
		t.Fatalf("sealed %d checkpoints, want 2", len(cps))
	}
	if checkpointHash(cps[0]) != cps[0].Hash {
		t.Fatalf("checkpoint 1 as sealed does not hash to its own hash")
	}
	head := cps[1].HashHex()
	if rep := b.verify(t, VerifyOptions{Head: head}); !rep.OK {
		t.Fatalf("before tampering: %+v", rep.Problem)
	}
	// The owner rewrites checkpoint 1 consistently (a new created_at, its
	// hash recomputed) and relinks checkpoint 2 to it, leaving checkpoint 2's
	// own hash, the head kept outside the database, as it was.
	forged := cps[0]
	forged.CreatedAt = forged.CreatedAt.Add(-time.Hour).Truncate(time.Microsecond)
	h := checkpointHash(forged)
	b.owns(t, disableCps)
	if _, err := b.owner.Exec(ctx, `UPDATE webhook_ingress.audit_checkpoints SET created_at = $1, hash = $2 WHERE seq = 1`,
		forged.CreatedAt, h[:]); err != nil {
		t.Fatal(err)
	}
	if _, err := b.owner.Exec(ctx, `UPDATE webhook_ingress.audit_checkpoints SET prev_hash = $1 WHERE seq = 2`, h[:]); err != nil {
		t.Fatal(err)
	}
	b.owns(t, enableCps)
	rep := b.verify(t, VerifyOptions{Head: head})
	if rep.OK || rep.Problem == nil || rep.Problem.Kind != BrokenChain {
		t.Fatalf("verify with the kept head after checkpoint 1 was rewritten and relinked: %+v, want %s", rep, BrokenChain)
	}
}
