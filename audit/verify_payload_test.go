package audit

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/inlet-dev/inlet/backfill"
	"github.com/inlet-dev/inlet/schema"
)

// TestVerifyNoticesANulledPayload (review helper-305, fixed).
// Defect: the owner, with events_append_only_row off, sets a sealed event's
// payload (the parsed copy auditors' JSON-path queries read: inlet events
// list --where) to NULL, and `inlet audit verify` answers intact. The event
// is then silently gone from every --where answer ("which events name
// customer cus_123?"). docs/database.md "Tamper evidence" says verify reports
// "each event altered (even by the owner with the triggers disabled; its
// parsed copy `payload`, not sealed itself, is checked against the sealed
// body: 051)"; a payload removed is not checked. Root cause:
// schema/queries/audit.sql AuditEventsToVerify (payload_intact is
// `payload IS NULL OR …`) and audit/hash.go appendEventFields, which seals
// nothing of payload (not even whether one was stored), so Verify cannot tell
// a payload removed from one never kept.
// Setup: three Stripe events stored as ingress stores a store_json source
// (payload set); sealed; verify intact; owner disables the trigger and sets
// event 1's payload to NULL.
// Expected: verify reports altered_event 1 (a payload sealed as present is
// gone).
// Observed: rep.OK = true, 0 problems; the auditor's JSON-path query for
// customer cus_real finds 2 events instead of 3.
// Fixed: the sealer writes event leaves in format v3, which seal one byte
// "payload stored" (read through audit_events_to_seal, 078, which gives
// webhook_sealer payload IS NOT NULL and never the payload); Verify reports
// a payload sealed as stored and NULL now as altered_event, counts one
// sealed NULL and filled since (inlet backfill stored) as
// Report.PayloadFilled, and still accepts v1 and v2 leaves.
func TestVerifyNoticesANulledPayload(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, Config{MaxLeaves: 10})
	for i := range 3 {
		_, err := b.writer.Exec(ctx, schema.Query("InsertEvent"), "stripe", "stripe", "evt_r305_"+itoa(int64(i)), "invoice.paid",
			map[string][]string{"Stripe-Signature": {"t=1,v1=00"}},
			[]byte(`{"id":"evt","data":{"object":{"customer":"cus_real"}}}`), true, 0, "/webhooks/stripe", "", true, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
	}
	if cps := b.seal(t); len(cps) != 1 {
		t.Fatalf("sealed %d checkpoints, want 1", len(cps))
	}
	customers := func() int {
		var n int
		if err := b.audit.QueryRow(ctx, `SELECT count(*) FROM webhook_ingress.events WHERE payload @@ '$.data.object.customer == "cus_real"'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if rep := b.verify(t, VerifyOptions{}); !rep.OK || customers() != 3 {
		t.Fatalf("before tampering: %+v, %d events of cus_real", rep.Problem, customers())
	}
	b.owns(t, disableEvents, `UPDATE webhook_ingress.events SET payload = NULL WHERE id = 1`, enableEvents)
	after := customers()
	rep := b.verify(t, VerifyOptions{})
	t.Logf("after the owner nulled event 1's payload: the auditor's JSON-path query finds %d events of cus_real (was 3); verify OK=%v, %d problems",
		after, rep.OK, rep.ProblemsFound)
	if rep.OK {
		t.Fatalf("verify after the owner removed sealed event 1's payload (an auditor's --where no longer finds it): intact, want altered_event 1")
	}
	if rep.Problem.Kind != AlteredEvent || rep.Problem.EventID != 1 {
		t.Fatalf("problem %+v, want altered_event of event 1", rep.Problem)
	}
}

// Leaf format v3 is v2's data after its own tag, then one byte: 1 when
// payload is stored, else 0 (as the package doc spells it, encoded here
// independently of hash.go). matchLeaf tells an intact row from one whose
// occurred_at or payload inlet backfill stored filled since (from NULL only),
// from one whose payload was removed, and accepts v2 leaves, which say
// nothing of payload, whatever it holds now.
func TestEventLeafV3Format(t *testing.T) {
	t.Parallel()
	e := Event{ID: 42, Provider: "stripe", ExternalEventID: "evt_1", EventType: "invoice.paid",
		ReceivedAt: time.Date(2026, 12, 1, 10, 0, 0, 123456000, time.UTC), BodySHA256: make([]byte, 32), HeadersSHA256: make([]byte, 32),
		Scheme: "stripe", RequestURI: "/webhooks/stripe", SignatureVerified: true, SecretIndex: -1}
	for i := range 32 {
		e.BodySHA256[i], e.HeadersSHA256[i] = byte(i), byte(255-i)
	}
	occurred := e.ReceivedAt.Add(-time.Second)
	spelled := func(occurred *time.Time, stored bool) [32]byte {
		str := func(b []byte, s string) []byte { return append(binary.BigEndian.AppendUint32(b, uint32(len(s))), s...) }
		b := []byte{0x00}
		b = append(b, "inlet-audit-event-v3\n"...)
		b = binary.BigEndian.AppendUint64(b, 42)
		b = str(b, "stripe")
		b = str(b, "evt_1")
		b = str(b, "invoice.paid")
		b = binary.BigEndian.AppendUint64(b, uint64(e.ReceivedAt.UnixMicro()))
		b = append(b, e.BodySHA256...)
		b = append(b, e.HeadersSHA256...)
		b = str(b, "stripe")
		b = str(b, "/webhooks/stripe")
		b = append(b, 1)                      // signature_verified
		b = append(b, 0xff, 0xff, 0xff, 0xff) // secret_index NULL: -1
		if occurred == nil {
			b = append(b, 0)
		} else {
			b = append(b, 1)
			b = binary.BigEndian.AppendUint64(b, uint64(occurred.UnixMicro()))
		}
		if stored {
			return sha256.Sum256(append(b, 1))
		}
		return sha256.Sum256(append(b, 0))
	}
	seen := map[[32]byte]string{eventLeafV1(e): "v1", eventLeafV2(e, nil): "v2 NULL", eventLeafV2(e, &occurred): "v2 occurred"}
	for _, c := range []struct {
		occurred *time.Time
		stored   bool
		name     string
	}{{nil, false, "v3 NULL, no payload"}, {nil, true, "v3 NULL, payload"}, {&occurred, false, "v3 occurred, no payload"}, {&occurred, true, "v3 occurred, payload"}} {
		got := eventLeafV3(e, c.occurred, c.stored)
		if got != spelled(c.occurred, c.stored) {
			t.Errorf("%s: leaf %x, not the format the package doc spells", c.name, got)
		}
		if other, dup := seen[got]; dup {
			t.Errorf("leaves %s and %s are the same", c.name, other)
		}
		seen[got] = c.name
	}

	stored := e
	stored.OccurredAt, stored.PayloadStored = &occurred, true
	if eventLeaf(stored) != eventLeafV3(stored, &occurred, true) {
		t.Error("eventLeaf of an event with occurred_at and payload is not its v3 leaf")
	}
	none := e // occurred_at and payload NULL
	epoch := time.Unix(0, 0).UTC()
	for _, c := range []struct {
		name string
		row  Event
		leaf [32]byte
		want leafMatch
	}{
		{"v3 intact", stored, eventLeafV3(stored, &occurred, true), leafIntact},
		{"v3 intact, nothing stored", none, eventLeafV3(none, nil, false), leafIntact},
		{"v2 intact", stored, eventLeafV2(stored, &occurred), leafIntact},
		{"v1 intact", stored, eventLeafV1(stored), leafIntact},
		{"v2 sealed with a payload now NULL (v2 does not say)", none, eventLeafV2(none, nil), leafIntact},
		{"v3 occurred_at filled", stored, eventLeafV3(stored, nil, true), leafOccurredAtFilled},
		{"v2 occurred_at filled", stored, eventLeafV2(stored, nil), leafOccurredAtFilled},
		{"v3 payload filled", stored, eventLeafV3(stored, &occurred, false), leafPayloadFilled},
		{"v3 both filled", stored, eventLeafV3(stored, nil, false), leafOccurredAtFilled | leafPayloadFilled},
		{"v3 payload removed", none, eventLeafV3(none, nil, true), leafPayloadRemoved},
		{"v3 payload removed, occurred_at filled", Event{ID: 42, Provider: e.Provider, ExternalEventID: e.ExternalEventID, EventType: e.EventType,
			ReceivedAt: e.ReceivedAt, BodySHA256: e.BodySHA256, HeadersSHA256: e.HeadersSHA256, Scheme: e.Scheme, RequestURI: e.RequestURI,
			SignatureVerified: true, SecretIndex: -1, OccurredAt: &occurred}, eventLeafV3(none, nil, true), leafPayloadRemoved},
		{"v3 sealed occurred_at set to NULL", func() Event { x := stored; x.OccurredAt = nil; return x }(), eventLeafV3(stored, &occurred, true), leafAltered},
		{"v3 sealed occurred_at moved", stored, eventLeafV3(stored, &epoch, true), leafAltered},
		{"v3 another column changed", func() Event { x := stored; x.EventType = "refund"; return x }(), eventLeafV3(stored, &occurred, true), leafAltered},
		{"v3 another column changed, payload removed", func() Event { x := none; x.EventType = "refund"; return x }(), eventLeafV3(none, nil, true), leafAltered},
	} {
		m := matchLeaf(c.row, c.leaf)
		if m != c.want {
			t.Errorf("%s: matchLeaf %d, want %d", c.name, m, c.want)
		}
		if m.intact() != (c.want != leafAltered && c.want != leafPayloadRemoved) {
			t.Errorf("%s: intact %v", c.name, m.intact())
		}
	}
}

// A payload that was NULL when its event was sealed (v3) and that inlet
// backfill stored fills afterwards is not tampering: verify counts and lists
// it (Report.PayloadFilled), OK still true, and still checks it against the
// body. A filled payload rewritten is altered; one sealed NULL, filled and
// set NULL again is back as sealed. The sealer reads whether payload is
// stored through audit_events_to_seal, never payload itself.
func TestVerifyCountsPayloadFilledAfterSealing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, Config{MaxLeaves: 10})
	// Events 1 and 2 as a source with store_json off stored them; 3 with it on.
	for i, storeJSON := range []bool{false, false, true} {
		ext := "evt_pfill_" + itoa(int64(i+1))
		if _, err := b.writer.Exec(ctx, schema.Query("InsertEvent"), "stripe", "stripe", ext, "invoice.paid",
			map[string][]string{"Stripe-Signature": {"t=1,v1=00"}}, []byte(`{"id":"`+ext+`","data":{"object":{"customer":"cus_1"}}}`), true, 0,
			"/webhooks/stripe", "", storeJSON, nil, 0); err != nil {
			t.Fatal(err)
		}
	}
	if cps := b.seal(t); len(cps) != 1 || cps[0].LastEventID != 3 {
		t.Fatalf("seal: %+v, want one checkpoint of ids 1..3", cps)
	}
	// What the sealer may read: whether payload is stored, not payload.
	var stored []bool
	if err := pgx.BeginFunc(ctx, b.sealDB, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT payload_stored FROM webhook_ingress.audit_events_to_seal(1, 10)`)
		if err != nil {
			return err
		}
		stored, err = pgx.CollectRows(rows, pgx.RowTo[bool])
		return err
	}); err != nil || !slices.Equal(stored, []bool{false, false, true}) {
		t.Fatalf("the sealer's audit_events_to_seal: payload stored %v, %v; want [false false true]", stored, err)
	}
	if _, err := b.sealDB.Exec(ctx, `SELECT payload FROM webhook_ingress.events`); !isPermissionDenied(err) {
		t.Fatalf("the sealer reads payload: %v", err)
	}
	if _, err := b.audit.Exec(ctx, `SELECT * FROM webhook_ingress.audit_events_to_seal(1, 10)`); !isPermissionDenied(err) {
		t.Fatalf("the auditor runs the sealer's function: %v, want permission denied", err)
	}

	conn, err := pgx.Connect(ctx, b.url) // the owner, as inlet backfill stored runs
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	st, err := backfill.FillStored(ctx, conn, backfill.StoredConfig{})
	if err != nil {
		t.Fatal(err)
	}
	var filled int
	if err := b.audit.QueryRow(ctx, `SELECT count(*) FROM webhook_ingress.events WHERE payload IS NOT NULL`).Scan(&filled); err != nil || filled != 3 {
		t.Fatalf("after inlet backfill stored (%+v): %d payloads, %v; want 3", st, filled, err)
	}
	rep := b.verify(t, VerifyOptions{})
	if !rep.OK || rep.PayloadFilled != 2 || !slices.Equal(rep.PayloadFilledIDs, []int64{1, 2}) {
		t.Fatalf("verify after inlet backfill stored filled events 1 and 2's payload: %+v, want OK with payload filled after sealing [1 2]", rep)
	}
	if rep := b.verify(t, VerifyOptions{MaxProblems: 1}); rep.PayloadFilled != 2 || !slices.Equal(rep.PayloadFilledIDs, []int64{1}) {
		t.Fatalf("verify --max-problems 1: %d filled, ids %v, want 2 and [1]", rep.PayloadFilled, rep.PayloadFilledIDs)
	}

	b.owns(t, disableEvents,
		`UPDATE webhook_ingress.events SET payload = NULL WHERE id = 1`,
		`UPDATE webhook_ingress.events SET payload = '{"id":"forged"}' WHERE id = 2`,
		`UPDATE webhook_ingress.events SET payload = NULL WHERE id = 3`,
		enableEvents)
	rep = b.verify(t, VerifyOptions{})
	var ids []int64
	for _, p := range rep.Problems {
		t.Logf("problem: %s", p.Reason)
		if p.Kind == AlteredEvent {
			ids = append(ids, p.EventID)
		}
	}
	if rep.OK || !slices.Equal(ids, []int64{2, 3}) || rep.PayloadFilled != 0 {
		t.Fatalf("verify after the owner nulled event 1's filled payload, forged event 2's and nulled event 3's sealed one: altered %v, filled %v; want altered [2 3], none filled; %+v",
			ids, rep.PayloadFilledIDs, rep)
	}
	if r := rep.Problems[1].Reason; !strings.Contains(r, "payload") || !strings.Contains(r, "NULL now") {
		t.Errorf("event 3's reason %q does not say its sealed payload is gone", r)
	}
}

// Checkpoints sealed before 078 (v2 leaves: whether payload is stored not in
// them) still verify beside the v3 ones sealed after; a payload removed from
// one of their events goes unseen (the limit the package doc names), one
// removed from an event of a v3 checkpoint is reported.
func TestVerifyAcceptsCheckpointsSealedBeforePayloadStored(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, Config{MaxLeaves: 10})
	insert := func(ext string) {
		t.Helper()
		if _, err := b.writer.Exec(ctx, schema.Query("InsertEvent"), "stripe", "stripe", ext, "invoice.paid",
			map[string][]string{"Stripe-Signature": {"t=1,v1=00"}}, []byte(`{"id":"`+ext+`"}`), true, 0,
			"/webhooks/stripe", "", true, nil, 0); err != nil {
			t.Fatal(err)
		}
	}
	insert("evt_v2_1")
	insert("evt_v2_2")
	b.sealer.leaf = func(e Event) tlog.Hash { return eventLeafV2(e, e.OccurredAt) } // as the previous version sealed
	if cps := b.seal(t); len(cps) != 1 || cps[0].LastEventID != 2 {
		t.Fatalf("v2 seal: %+v, want one checkpoint of ids 1..2", cps)
	}
	b.sealer.leaf = nil
	insert("evt_v3_3")
	if cps := b.seal(t); len(cps) != 1 || cps[0].FirstEventID != 3 || cps[0].LastEventID != 3 {
		t.Fatalf("v3 seal: %+v, want one checkpoint of id 3", cps)
	}
	if rep := b.verify(t, VerifyOptions{}); !rep.OK || rep.Checkpoints != 2 || rep.Events != 3 || rep.PayloadFilled != 0 {
		t.Fatalf("verify a v2 checkpoint and a v3 one: %+v", rep)
	}
	b.owns(t, disableEvents, `UPDATE webhook_ingress.events SET payload = NULL WHERE id IN (1, 3)`, enableEvents)
	rep := b.verify(t, VerifyOptions{})
	var ids []int64
	for _, p := range rep.Problems {
		ids = append(ids, p.EventID)
	}
	if rep.OK || !slices.Equal(ids, []int64{3}) || rep.Problem.Kind != AlteredEvent {
		t.Fatalf("verify after the owner nulled the payload of events 1 (v2) and 3 (v3): problems at %v, want altered_event 3 only; %+v", ids, rep)
	}
}
