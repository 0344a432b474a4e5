package admin_test

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/admin"
	"github.com/inlet-dev/inlet/backfill"
)

// TestSnapshotCursorKeepsEventsFilledByBackfillStored (review helper-216;
// this describes the code before the fix).
//
// Defect: `inlet backfill stored` (backfill.FillStored) UPDATEs event rows
// (occurred_at, payload) — the one UPDATE events_guard lets through. An
// UPDATE writes a new row version whose xmin is the backfill's transaction,
// while received_at stays the event's own. The listing's later pages judged
// a row received in the last hour by its xmin against the first page's
// snapshot (schema/queries/admin.sql AdminListEvents / AdminListEventsWhere,
// the pg_visible_in_snapshot(... e.xmin ...) term); the backfill's xid is
// not visible in that snapshot, and the old version (which was) is gone
// from the later page's own snapshot. So every event the backfill filled
// between two pages of one listing disappeared from the listing: shown on
// no page at all, although it was committed long before the first page (and
// is in the log "as of the first page's snapshot", the cursor's promise).
// The comment there assumed "a row's inserting transaction is its xmin";
// that is false for a row the backfill updated.
//
// Expected: the pages of one listing show every event committed before the
// first page: here [evt_3, evt_2, evt_1]. It showed [evt_3] before the fix;
// now each row records its inserting transaction (events.inserted_xid,
// migration 070), which an UPDATE keeps, and later pages judge it by that.
func TestSnapshotCursorKeepsEventsFilledByBackfillStored(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	// Three Stripe events stored without payload/occurred_at (as before
	// 012, or before the source kept a payload), received now.
	for i := 1; i <= 3; i++ {
		b.insert(t, event{source: "stripe", id: fmt.Sprint("evt_", i), eventType: "invoice.paid",
			body: []byte(fmt.Sprintf(`{"id":"evt_%d","object":"event","type":"invoice.paid","created":1700000000,"n":%d}`, i, i))})
	}

	f := admin.EventFilter{Provider: "stripe", Limit: 1}
	page, err := admin.ListEvents(ctx, b.op, f)
	if err != nil {
		t.Fatal(err)
	}
	var seen []string
	for _, e := range page.Events {
		seen = append(seen, e.ExternalEventID)
	}
	if page.Next == "" {
		t.Fatalf("page 1 %v has no next cursor", seen)
	}

	// Between page 1 and page 2, the owner runs `inlet backfill stored`.
	pc, err := b.super.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	st, err := backfill.FillStored(ctx, pc.Conn(), backfill.StoredConfig{
		Sources: map[string]backfill.Derive{"stripe": {StoreJSON: true, StoreJSONMaxBytes: 1 << 20}},
	})
	pc.Release()
	if err != nil {
		t.Fatal(err)
	}
	if st.Payloads != 3 {
		t.Fatalf("setup: backfill filled %d payloads, want 3 (%+v)", st.Payloads, st)
	}

	for page.Next != "" {
		f.Cursor = page.Next
		if page, err = admin.ListEvents(ctx, b.op, f); err != nil {
			t.Fatal(err)
		}
		for _, e := range page.Events {
			seen = append(seen, e.ExternalEventID)
		}
	}
	if want := []string{"evt_3", "evt_2", "evt_1"}; !slices.Equal(seen, want) {
		t.Fatalf("the pages of one listing showed %v, want %v: every event was committed before page 1, "+
			"but the ones `inlet backfill stored` filled between the pages (new row version, new xmin) are on no page", seen, want)
	}
}

// TestSnapshotCursorForgedTimeIs400 (review helper-216; this describes the
// code before the fix).
//
// Defect: the cursor is client input (GET /api/events?before=, the
// dashboard's ?before=, --before). parseEventCursor (admin/events.go) took
// any positive int64 as its TIME; ListEvents then passed
// time.Unix(TIME).Add(-1h) to PostgreSQL as settled_before. A TIME past
// PostgreSQL's timestamptz range (or past what pgx can encode) failed the
// query in the database: the API answered 500 ("internal error"), where a
// malformed cursor is documented as 400 (admin/api.go: "a malformed one is
// 400"; EventFilter.Cursor: "a malformed one is ErrInvalid").
//
// Expected: 400 (ErrInvalid) for any cursor whose time is out of range
// (e.g. later than now, as the first page's transaction start never is).
// before=…@9300000000000@… answered 500 "timestamp out of range" before the
// fix; parseEventCursor now refuses a time later than now (and a day's
// clock skew).
func TestSnapshotCursorForgedTimeIs400(t *testing.T) {
	t.Parallel()
	b := setupAPI(t)
	ctx := context.Background()
	for i := range 3 {
		b.insert(t, event{source: "stripe", id: fmt.Sprint("evt_", i), eventType: "invoice.paid", body: []byte(`{}`)})
	}
	page, err := admin.ListEvents(ctx, b.op, admin.EventFilter{Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	parts := strings.SplitN(page.Next, "@", 3)
	if len(parts) != 3 {
		t.Fatalf("setup: next %q", page.Next)
	}
	var bad []string
	for _, tm := range []string{"9223372036854775807", "99999999999999", "9300000000000"} {
		c := parts[0] + "@" + tm + "@" + parts[2]
		code, _, body := b.call(t, "GET", "/api/events?limit=1&before="+url.QueryEscape(c), "")
		if code >= 500 {
			bad = append(bad, fmt.Sprintf("before=%s: %d %s", c, code, strings.TrimSpace(string(body))))
		}
	}
	if len(bad) > 0 {
		t.Fatalf("a forged cursor time is answered as a server error, want 400:\n%s", strings.Join(bad, "\n"))
	}
}

// TestSnapshotCursorJudgesRowsBefore070ByXmin: rows stored before migration
// 070 have no inserted_xid (NULL), and later pages judge them by their xmin
// as before: ids 1 (C) and 4 (A) are in flight while 2, 3 and 5 commit;
// page 1 (limit 2) is [5, 3]; then A and C commit, and page 2 shows only 2,
// the log as of page 1, with and without --where. Listing again shows all.
func TestSnapshotCursorJudgesRowsBefore070ByXmin(t *testing.T) {
	t.Parallel()
	for _, where := range []string{"", `$.n > 0`} {
		t.Run(fmt.Sprintf("where %q", where), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			ctx := context.Background()
			// As stored before 070: inserted_xid NULL (only the owner may
			// name the column).
			insert := func(q interface {
				QueryRow(context.Context, string, ...any) pgx.Row
			}, extID string) int64 {
				t.Helper()
				var id int64
				if err := q.QueryRow(ctx, `INSERT INTO webhook_ingress.events
					(provider, scheme, external_event_id, event_type, headers, request_uri, raw_body, payload, signature_verified, secret_index, inserted_xid)
					VALUES ('stripe', 'stripe', $1, 'invoice.paid', '{}', '/webhooks/stripe', '{"n":1}', '{"n":1}', true, 0, NULL) RETURNING id`,
					extID).Scan(&id); err != nil {
					t.Fatal(err)
				}
				return id
			}
			inFlight := func(extID string) (pgx.Tx, int64) {
				t.Helper()
				tx, err := b.super.Begin(ctx)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = tx.Rollback(ctx) })
				return tx, insert(tx, extID)
			}
			txC, idC := inFlight("evt_C")
			insert(b.super, "evt_2")
			id3 := insert(b.super, "evt_3")
			txA, idA := inFlight("evt_A")
			insert(b.super, "evt_5")
			if !(idC < id3 && id3 < idA) {
				t.Fatalf("setup: ids C %d, 3 %d, A %d", idC, id3, idA)
			}

			list := func(between func()) []string {
				t.Helper()
				var seen []string
				f := admin.EventFilter{Limit: 2, Where: where}
				for {
					page, err := admin.ListEvents(ctx, b.op, f)
					if err != nil {
						t.Fatal(err)
					}
					for _, e := range page.Events {
						seen = append(seen, e.ExternalEventID)
					}
					if page.Next == "" {
						return seen
					}
					between()
					f.Cursor = page.Next
				}
			}
			seen := list(func() {
				for _, tx := range []pgx.Tx{txA, txC} {
					if tx != nil {
						if err := tx.Commit(ctx); err != nil {
							t.Fatal(err)
						}
					}
				}
				txA, txC = nil, nil
			})
			if want := []string{"evt_5", "evt_3", "evt_2"}; !slices.Equal(seen, want) {
				t.Fatalf("the pages listed %v, want %v: the log as of the first page", seen, want)
			}
			if seen, want := list(func() {}), []string{"evt_5", "evt_A", "evt_3", "evt_2", "evt_C"}; !slices.Equal(seen, want) {
				t.Fatalf("listing again showed %v, want %v: every event committed by then", seen, want)
			}
			var nulls int
			if err := b.super.QueryRow(ctx, `SELECT count(*) FROM webhook_ingress.events WHERE inserted_xid IS NULL`).Scan(&nulls); err != nil || nulls != 5 {
				t.Fatalf("setup: %d rows without inserted_xid (%v), want 5", nulls, err)
			}
		})
	}
}
