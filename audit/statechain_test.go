package audit

import (
	"context"
	"testing"

	"github.com/inlet-dev/inlet/schema"
)

// TestStateOfIsUnverifiedWhileTheChainIsBroken proves that the dashboard's
// per-event verdict (StateOf) says "intact" for every event after a
// recorded verification found that the kept head is no longer in the chain.
//
// Regression test (review helper-96; fixed: the text describes the behaviour
// before the fix). the owner rewrites event 3's body, deletes every checkpoint and
// lets the sealer re-seal the rewritten log: a new, self-consistent chain.
// `inlet audit verify --head <kept head>` correctly reports OK=false,
// ChainBroken=true ("checkpoint … is not in the chain: checkpoints were
// removed or rewritten"), but that problem carries no event id and
// Report.SealedThrough is the whole (rewritten) chain, so StateOf returns
// StateIntact for event 3, the event that was rewritten. The dashboard shows
// the forged event as "intact" (docs/operations.md: "a sealed one as *intact*
// or, with no verification since it was sealed, *unverified*") while the
// banner and inlet_audit_chain_broken say the chain is broken.
//
// Expected: when the recorded verification has ChainBroken and no sound
// checkpoint vouches for the event (here: the head the operator kept is not in
// the chain, so nothing the chain says can be trusted), StateOf must not
// answer intact: StateUnverified (StateUnverified's own doc: "or the chain
// broke before it").
//
// Root cause: audit/record.go StateOf (the switch at the end) looks only at
// the problems' EventID, SealedThrough and ProblemsTruncated, never at
// Report.ChainBroken; audit/verify.go run() sets ChainBroken for a missing
// head after SealedThrough already covers every checkpoint.
func TestStateOfIsUnverifiedWhileTheChainIsBroken(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, Config{MaxLeaves: 10})
	for range 5 {
		b.insert(t, ctx)
	}
	cps := b.seal(t)
	if len(cps) != 1 {
		t.Fatalf("sealed %d checkpoints, want 1", len(cps))
	}
	head := cps[0].HashHex() // kept outside the database, as the docs advise

	// The owner rewrites event 3 and the whole chain.
	b.owns(t, disableEvents,
		`UPDATE webhook_ingress.events SET raw_body = '{"id":"forged"}' WHERE id = 3`,
		enableEvents,
		disableCps, `DELETE FROM webhook_ingress.audit_checkpoints`, enableCps)
	if cps := b.seal(t); len(cps) != 1 {
		t.Fatalf("re-seal: %d checkpoints, want 1", len(cps))
	}

	rep, err := Verify(ctx, b.owner, VerifyOptions{Head: head})
	if err != nil {
		t.Fatal(err)
	}
	if rep.OK || !rep.ChainBroken {
		t.Fatalf("verify --head after the rewrite: %+v, want a broken chain", rep)
	}
	if err := Record(ctx, b.owner, rep); err != nil {
		t.Fatal(err)
	}
	v, ok, err := LastVerification(ctx, b.owner)
	if err != nil || !ok {
		t.Fatalf("last verification: %v %v", ok, err)
	}
	state, _ := StateOf(v, ok, 3, 5)
	if state == StateIntact {
		t.Fatalf("event 3 (rewritten; the recorded verification found the kept head %s missing from the chain: %q) is shown as %q, want %q",
			head[:12], rep.Problem.Reason, state, StateUnverified)
	}
}

// TestVerifyNoticesARewrittenPayload proves that `inlet audit verify`
// reports intact after the owner (triggers disabled) rewrites an event's
// payload, the parsed copy of raw_body that auditors query with
// `inlet events list --where` and the JSON-path SQL in docs/database.md
// ("What an auditor runs").
//
// Regression test (review helper-96; fixed: the text describes the behaviour
// before the fix). docs/database.md ("Tamper evidence") says verify "reports every
// problem: each event altered (even by the owner with the triggers
// disabled)". payload is not in the leaf (deliberately: 012 says it is not
// sealed) and, unlike body_sha256 for raw_body, nothing checks it against
// the sealed body, although the schema itself defines what it must be: the
// events_guard trigger (012) accepts a payload only when it equals
// convert_from(raw_body, 'UTF8')::jsonb. So an owner can make
// `events list --where '$.data.object.customer == "cus_X"'` return, or
// hide, sealed events at will while verify says intact.
//
// Expected: verify reports an altered_event for id 1 (payload no longer the
// parsed raw_body).
//
// Root cause: schema/queries/audit.sql AuditEventsToVerify computes
// body_intact only from raw_body vs body_sha256; audit/verify.go
// checkpoint() (the `case !e.bodyOK` arm) has nothing for payload.
func TestVerifyNoticesARewrittenPayload(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, Config{MaxLeaves: 10})
	for i := range 3 {
		// As ingress stores a source with store_json: payload parsed from the body.
		_, err := b.writer.Exec(ctx, schema.Query("InsertEvent"), "stripe", "stripe", "evt_payload_"+itoa(int64(i)), "invoice.paid",
			map[string][]string{"Stripe-Signature": {"t=1,v1=00"}},
			[]byte(`{"id":"evt","data":{"object":{"customer":"cus_real"}}}`), true, 0, "/webhooks/stripe", "", true, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
	}
	if cps := b.seal(t); len(cps) != 1 {
		t.Fatalf("sealed %d checkpoints, want 1", len(cps))
	}
	if rep := b.verify(t, VerifyOptions{}); !rep.OK {
		t.Fatalf("before tampering: %+v", rep.Problem)
	}
	b.owns(t, disableEvents,
		`UPDATE webhook_ingress.events SET payload = '{"id":"evt","data":{"object":{"customer":"cus_forged"}}}' WHERE id = 1`,
		enableEvents)
	var n int
	if err := b.audit.QueryRow(ctx, `SELECT count(*) FROM webhook_ingress.events WHERE payload @@ '$.data.object.customer == "cus_forged"'`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("the auditor's JSON-path query: %d rows, %v", n, err)
	}
	rep := b.verify(t, VerifyOptions{})
	if rep.OK {
		t.Fatalf("verify after the owner rewrote event 1's payload (an auditor's --where now finds it as cus_forged): intact %+v, want altered_event 1", rep)
	}
	if rep.Problem.Kind != AlteredEvent || rep.Problem.EventID != 1 {
		t.Fatalf("problem %+v, want altered_event of event 1", rep.Problem)
	}
}
