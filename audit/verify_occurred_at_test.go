package audit

import (
	"context"
	"encoding/hex"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/backfill"
	"github.com/inlet-dev/inlet/schema"
)

// TestVerifyNoticesARewrittenOccurredAt (review helper-272, fixed).
// Defect: events.occurred_at, the provider's own event time that auditors
// query (docs/database.md "What an auditor runs": delivery lag
// `received_at - occurred_at`, `inlet events list --occurred-after/
// --occurred-before`), is neither sealed in the leaf (audit/hash.go:eventLeaf)
// nor checked by Verify (schema/queries/audit.sql AuditEventsToVerify checks
// raw_body and payload only). The owner, with the append-only trigger off,
// moves a sealed Stripe event's occurred_at by a day and `inlet audit verify`
// answers intact, although docs/database.md "Tamper evidence" promises it
// reports "each event altered (even by the owner with the triggers
// disabled)". 051 fixed exactly this for payload, the other derived column;
// occurred_at was left out.
// Setup: one Stripe event stored as ingress stores it, occurred_at set;
// sealed; verify intact; owner disables events_append_only_row, sets
// occurred_at = occurred_at - 1 day, re-enables.
// Expected: verify reports altered_event 1.
// Observed: rep.OK = true, 0 problems; the auditor's lag query now shows a
// 1-day delivery lag for an event delivered at once.
// Fixed: the sealer writes event leaves in format v2, which seal occurred_at
// (int64 µs, or a NULL marker; 075_audit_occurred_at lets webhook_sealer read
// it); Verify still accepts the v1 leaves sealed before (matchLeaf), and
// counts a v2 leaf sealed while occurred_at was NULL that now has one as
// Report.OccurredAtFilled rather than as tampering.
func TestVerifyNoticesARewrittenOccurredAt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, Config{MaxLeaves: 10})
	occurred := time.Now().Add(-2 * time.Second).UTC().Truncate(time.Microsecond)
	_, err := b.writer.Exec(ctx, schema.Query("InsertEvent"), "stripe", "stripe", "evt_review272_occ", "invoice.paid",
		map[string][]string{"Stripe-Signature": {"t=1,v1=00"}}, []byte(`{"id":"evt_review272_occ","created":1}`), true, 0,
		"/webhooks/stripe", "", true, occurred, 0)
	if err != nil {
		t.Fatal(err)
	}
	if cps := b.seal(t); len(cps) != 1 {
		t.Fatalf("sealed %d checkpoints, want 1", len(cps))
	}
	if rep := b.verify(t, VerifyOptions{}); !rep.OK {
		t.Fatalf("before tampering: %+v", rep.Problem)
	}
	b.owns(t, disableEvents,
		`UPDATE webhook_ingress.events SET occurred_at = occurred_at - interval '1 day' WHERE id = 1`,
		enableEvents)
	var lag time.Duration
	if err := b.audit.QueryRow(ctx, `SELECT extract(epoch FROM received_at - occurred_at)::float8 * 1e9 FROM webhook_ingress.events WHERE id = 1`).Scan(&lag); err != nil {
		t.Fatal(err)
	}
	rep := b.verify(t, VerifyOptions{})
	if rep.OK || rep.Problem == nil || rep.Problem.Kind != AlteredEvent || rep.Problem.EventID != 1 {
		t.Fatalf("verify after the owner moved event 1's occurred_at back a day (the auditor's delivery lag now reads %s): ok=%v problems=%d %+v, want altered_event 1",
			lag.Round(time.Second), rep.OK, rep.ProblemsFound, rep.Problem)
	}
}

// The leaf formats: v1 is byte for byte what every sealer before 075 wrote
// (the digest below is the old eventLeaf's), so those checkpoints still
// verify; v2 adds occurred_at, and its NULL marker differs from every time
// (the Unix epoch included); it is what every sealer from 075 to 078 wrote.
// matchLeaf tells the cases apart. (v3, what the sealer writes now:
// TestEventLeafV3Format.)
func TestEventLeafFormats(t *testing.T) {
	t.Parallel()
	e := Event{ID: 42, Provider: "stripe", ExternalEventID: "evt_1", EventType: "invoice.paid",
		ReceivedAt: time.Date(2026, 12, 1, 10, 0, 0, 123456000, time.UTC), BodySHA256: make([]byte, 32), HeadersSHA256: make([]byte, 32),
		Scheme: "stripe", RequestURI: "/webhooks/stripe", SignatureVerified: true, SecretIndex: -1}
	for i := range 32 {
		e.BodySHA256[i], e.HeadersSHA256[i] = byte(i), byte(255-i)
	}
	hexOf := func(h [32]byte) string { return hex.EncodeToString(h[:]) }
	if got, want := hexOf(eventLeafV1(e)), "cfa9a44ad1c1841861cb2473cc0d23d1b2e80b975d5c90dda53d204c95c8edca"; got != want {
		t.Errorf("v1 leaf %s, want %s (the format sealed before 075 must not change)", got, want)
	}
	occurred := e.ReceivedAt.Add(-time.Second)
	// The v2 digests as the package doc spells the format (checked against
	// an independent encoding of it).
	if got, want := hexOf(eventLeafV2(e, nil)), "655fa44243f64c0ba1673fd572b1e60637fbfad02efec454718165968adf41d6"; got != want {
		t.Errorf("v2 leaf, occurred_at NULL: %s, want %s", got, want)
	}
	if got, want := hexOf(eventLeafV2(e, &occurred)), "f1bb450b84fc624f8a12098666be881ee3bec4214451d95ab0a36db297669700"; got != want {
		t.Errorf("v2 leaf, occurred_at set: %s, want %s", got, want)
	}
	if eventLeaf(e) != eventLeafV3(e, nil, false) {
		t.Error("eventLeaf of an event with no occurred_at is not its v3 leaf with the NULL marker")
	}
	epoch := time.Unix(0, 0).UTC()
	leaves := map[string]string{}
	for name, h := range map[string][32]byte{
		"v1": eventLeafV1(e), "v2 NULL": eventLeafV2(e, nil), "v2 epoch": eventLeafV2(e, &epoch), "v2 occurred": eventLeafV2(e, &occurred),
	} {
		if other, dup := leaves[hexOf(h)]; dup {
			t.Errorf("leaves %s and %s are the same", name, other)
		}
		leaves[hexOf(h)] = name
	}
	e.OccurredAt = &occurred
	if eventLeaf(e) != eventLeafV3(e, &occurred, false) {
		t.Error("eventLeaf of an event with occurred_at is not its v3 leaf")
	}
	for want, tc := range map[leafMatch]struct {
		e    Event
		leaf [32]byte
	}{
		leafIntact:           {e, eventLeafV2(e, &occurred)},
		leafOccurredAtFilled: {e, eventLeafV2(e, nil)},
		leafAltered:          {e, eventLeafV2(e, &epoch)},
	} {
		if got := matchLeaf(tc.e, tc.leaf); got != want {
			t.Errorf("matchLeaf: %d, want %d", got, want)
		}
	}
	if got := matchLeaf(e, eventLeafV1(e)); got != leafIntact {
		t.Errorf("matchLeaf of a v1 leaf: %d, want intact", got)
	}
	noOcc := e
	noOcc.OccurredAt = nil
	if got := matchLeaf(noOcc, eventLeafV2(e, &occurred)); got != leafAltered {
		t.Errorf("matchLeaf of a sealed occurred_at set to NULL: %d, want altered", got)
	}
}

// A checkpoint sealed by a sealer before 075 (v1 leaves, occurred_at not
// sealed) still verifies, beside the v2 checkpoints sealed after it; its
// other sealed columns are still checked, and a v2 checkpoint after it
// catches a moved occurred_at.
func TestVerifyAcceptsCheckpointsSealedBeforeOccurredAt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, Config{MaxLeaves: 10})
	insert := func(ext string) {
		t.Helper()
		occurred := time.Now().Add(-time.Minute).UTC().Truncate(time.Microsecond)
		if _, err := b.writer.Exec(ctx, schema.Query("InsertEvent"), "stripe", "stripe", ext, "invoice.paid",
			map[string][]string{"Stripe-Signature": {"t=1,v1=00"}}, []byte(`{"id":"`+ext+`"}`), true, 0,
			"/webhooks/stripe", "", true, occurred, 0); err != nil {
			t.Fatal(err)
		}
	}
	for _, ext := range []string{"evt_old_1", "evt_old_2", "evt_old_3"} {
		insert(ext)
	}
	b.sealer.leaf = eventLeafV1 // as the previous version sealed
	if cps := b.seal(t); len(cps) != 1 || cps[0].LastEventID != 3 {
		t.Fatalf("v1 seal: %+v, want one checkpoint of ids 1..3", cps)
	}
	b.sealer.leaf = nil
	insert("evt_new_4")
	if cps := b.seal(t); len(cps) != 1 || cps[0].FirstEventID != 4 || cps[0].LastEventID != 4 {
		t.Fatalf("v2 seal: %+v, want one checkpoint of id 4", cps)
	}
	if rep := b.verify(t, VerifyOptions{}); !rep.OK || rep.Checkpoints != 2 || rep.Events != 4 || rep.OccurredAtFilled != 0 {
		t.Fatalf("verify a v1 checkpoint and a v2 one: %+v", rep)
	}
	b.owns(t, disableEvents,
		`UPDATE webhook_ingress.events SET event_type = 'charge.refunded' WHERE id = 2`,
		`UPDATE webhook_ingress.events SET occurred_at = occurred_at - interval '1 day' WHERE id IN (3, 4)`,
		enableEvents)
	rep := b.verify(t, VerifyOptions{})
	var ids []int64
	for _, p := range rep.Problems {
		if p.Kind != AlteredEvent {
			t.Errorf("problem %+v, want altered events only", p)
		}
		ids = append(ids, p.EventID)
	}
	// Event 3's occurred_at is not in its v1 leaf: what a checkpoint sealed
	// before 075 cannot show (package doc, "What it does not prove").
	if rep.OK || !slices.Equal(ids, []int64{2, 4}) || rep.ChainBroken {
		t.Fatalf("verify after the owner changed event 2's type (v1) and events 3's (v1) and 4's (v2) occurred_at: altered %v, want [2 4]; %+v", ids, rep)
	}
}

// An occurred_at that was NULL when its event was sealed and that inlet
// backfill stored fills afterwards is not tampering: verify counts and lists
// it (Report.OccurredAtFilled), OK still true. A sealed occurred_at set to
// NULL, or changed again after such a fill, is.
func TestVerifyCountsOccurredAtFilledAfterSealing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, Config{MaxLeaves: 10})
	created := time.Now().Add(-time.Hour).UTC().Truncate(time.Second)
	// As an ingress before 012 stored them: occurred_at and payload NULL,
	// though Stripe's created is in the body.
	for i, ext := range []string{"evt_fill_1", "evt_fill_2"} {
		body := []byte(`{"id":"` + ext + `","created":` + strconv.FormatInt(created.Unix()+int64(i), 10) + `}`)
		if _, err := b.writer.Exec(ctx, schema.Query("InsertEvent"), "stripe", "stripe", ext, "invoice.paid",
			map[string][]string{"Stripe-Signature": {"t=1,v1=00"}}, body, true, 0, "/webhooks/stripe", "", false, nil, 0); err != nil {
			t.Fatal(err)
		}
	}
	occurred := time.Now().Add(-time.Minute).UTC().Truncate(time.Microsecond)
	if _, err := b.writer.Exec(ctx, schema.Query("InsertEvent"), "stripe", "stripe", "evt_fill_3", "invoice.paid",
		map[string][]string{"Stripe-Signature": {"t=1,v1=00"}}, []byte(`{"id":"evt_fill_3"}`), true, 0,
		"/webhooks/stripe", "", true, occurred, 0); err != nil {
		t.Fatal(err)
	}
	if cps := b.seal(t); len(cps) != 1 || cps[0].LastEventID != 3 {
		t.Fatalf("seal: %+v, want one checkpoint of ids 1..3", cps)
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
	if st.Occurred != 2 {
		t.Fatalf("backfill stored gave %d events an occurred_at, want 2 (events 1 and 2): %+v", st.Occurred, st)
	}
	rep := b.verify(t, VerifyOptions{})
	if !rep.OK || rep.OccurredAtFilled != 2 || !slices.Equal(rep.OccurredAtFilledIDs, []int64{1, 2}) {
		t.Fatalf("verify after inlet backfill stored filled events 1 and 2: %+v, want OK with occurred_at filled after sealing [1 2]", rep)
	}
	if rep := b.verify(t, VerifyOptions{MaxProblems: 1}); rep.OccurredAtFilled != 2 || !slices.Equal(rep.OccurredAtFilledIDs, []int64{1}) {
		t.Fatalf("verify --max-problems 1: %d filled, ids %v, want 2 and [1]", rep.OccurredAtFilled, rep.OccurredAtFilledIDs)
	}

	b.owns(t, disableEvents,
		`UPDATE webhook_ingress.events SET event_type = 'charge.refunded' WHERE id = 2`,
		`UPDATE webhook_ingress.events SET occurred_at = NULL WHERE id = 3`,
		enableEvents)
	rep = b.verify(t, VerifyOptions{})
	var ids []int64
	for _, p := range rep.Problems {
		if p.Kind == AlteredEvent {
			ids = append(ids, p.EventID)
		}
	}
	if rep.OK || !slices.Equal(ids, []int64{2, 3}) || rep.OccurredAtFilled != 1 || !slices.Equal(rep.OccurredAtFilledIDs, []int64{1}) {
		t.Fatalf("verify after the owner changed filled event 2's type and set event 3's sealed occurred_at to NULL: altered %v, filled %v; want altered [2 3], filled [1]; %+v",
			ids, rep.OccurredAtFilledIDs, rep)
	}
}
