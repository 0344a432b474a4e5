package admin_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/admin"
)

// TestEventPagesShowOneSnapshot proves that paging through the event log
// with the documented cursor (next_before of GET /api/events, the --json
// "next" and --before of "inlet events list") shows the log as it was at one
// moment, never a set of events it held at no moment (review helper-207;
// this describes the code before the fix).
//
// Ingress commits with GroupConfig.Committers (default 2) concurrent
// transactions, and backfill/reconcile insert beside it, so event ids are
// routinely committed out of id order (the audit sealer knows this and waits
// for inserts in flight, docs/database.md "Audit"). Here, ids 1 (tx C) and 4
// (tx A) are in flight while 2, 3 and 5 are committed. The auditor lists
// newest first, --limit 2: page 1 is [5, 3] (4 not yet visible). Then A
// commits (event 4) and after it C (event 1). Page 2 (below 3) was [2, 1]:
// the pages together showed evt_C (committed last) but never evt_A
// (committed before it, received earlier, inside the window): a gap with no
// hint, in the tool auditors use to answer "what arrived". The test failed
// so before the fix, for both queries (with and without --where).
//
// Root cause: admin/events.go ListEvents paged on id alone (next_before =
// last id shown, schema/queries/admin.sql AdminListEvents
// "e.id < before_id"), each page in a fresh snapshot, while ids are drawn
// before commit and committed out of order.
//
// Now the cursor carries the first page's snapshot and later pages show
// only the rows visible in it: the pages are exactly [5, 3, 2], and a new
// listing shows A and C. The events are received now (received_at is the
// inserting transaction's now() in every write path): only rows received
// up to an hour before the first page are judged by their xmin.
func TestEventPagesShowOneSnapshot(t *testing.T) {
	t.Parallel()
	for _, where := range []string{"", `$.n > 0`} {
		t.Run(fmt.Sprintf("where %q", where), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			ctx := context.Background()
			base := time.Now().Add(-time.Minute).Truncate(time.Second)
			insert := func(q interface {
				QueryRow(context.Context, string, ...any) pgx.Row
			}, extID string, at time.Time) int64 {
				t.Helper()
				var id int64
				if err := q.QueryRow(ctx, `INSERT INTO webhook_ingress.events
					(provider, scheme, external_event_id, event_type, received_at, headers, request_uri, raw_body, payload, signature_verified, secret_index)
					VALUES ('stripe', 'stripe', $1, 'invoice.paid', $2, '{}', '/webhooks/stripe', '{"n":1}', '{"n":1}', true, 0) RETURNING id`,
					extID, at).Scan(&id); err != nil {
					t.Fatal(err)
				}
				return id
			}
			inFlight := func(extID string, at time.Time) (pgx.Tx, int64) {
				t.Helper()
				tx, err := b.super.Begin(ctx)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = tx.Rollback(ctx) })
				return tx, insert(tx, extID, at)
			}

			txC, idC := inFlight("evt_C", base)
			insert(b.super, "evt_2", base.Add(1*time.Second))
			id3 := insert(b.super, "evt_3", base.Add(2*time.Second))
			txA, idA := inFlight("evt_A", base.Add(3*time.Second))
			insert(b.super, "evt_5", base.Add(4*time.Second))
			if !(idC < id3 && id3 < idA) {
				t.Fatalf("setup: ids C %d, 3 %d, A %d", idC, id3, idA)
			}

			until := base.Add(time.Hour) // a fixed window, as an auditor pages it
			list := func() []string {
				t.Helper()
				var seen []string
				f := admin.EventFilter{Until: until, Limit: 2, Where: where}
				page, err := admin.ListEvents(ctx, b.op, f)
				if err != nil {
					t.Fatal(err)
				}
				for {
					for _, e := range page.Events {
						seen = append(seen, e.ExternalEventID)
					}
					if page.Next == "" {
						return seen
					}
					// The two other transactions commit while the auditor
					// reads page 1: A first.
					if txA != nil {
						if err := txA.Commit(ctx); err != nil {
							t.Fatal(err)
						}
						if err := txC.Commit(ctx); err != nil {
							t.Fatal(err)
						}
						txA, txC = nil, nil
					}
					if f.Cursor = page.Next; page.NextBefore == 0 || !strings.HasPrefix(page.Next, fmt.Sprint(page.NextBefore, "@")) {
						t.Fatalf("next %q does not continue below next_before %d", page.Next, page.NextBefore)
					}
					if page, err = admin.ListEvents(ctx, b.op, f); err != nil {
						t.Fatal(err)
					}
				}
			}

			seen := list()
			if slices.Contains(seen, "evt_C") && !slices.Contains(seen, "evt_A") {
				t.Fatalf("following the pages (limit 2, next_before) listed %v: evt_C (id %d, committed last) is shown, "+
					"evt_A (id %d, committed before it, inside the window) fell between page 1 and page 2 and is never shown", seen, idC, idA)
			}
			if want := []string{"evt_5", "evt_3", "evt_2"}; !slices.Equal(seen, want) {
				t.Fatalf("the pages listed %v, want %v: the log as of the first page", seen, want)
			}
			if seen, want := list(), []string{"evt_5", "evt_A", "evt_3", "evt_2", "evt_C"}; !slices.Equal(seen, want) {
				t.Fatalf("listing again showed %v, want %v: every event committed by then", seen, want)
			}
		})
	}
}

// TestEventCursorRefusesMalformed: the cursor is a client's input, so a
// malformed one is ErrInvalid (400 from the API, a usage error in the CLI),
// checked before anything reaches PostgreSQL; a bare id still pages by id.
func TestEventCursorRefusesMalformed(t *testing.T) {
	t.Parallel()
	b := setupAPI(t)
	ctx := context.Background()
	for _, c := range []string{
		"x", "-1", "1@", "1@x@1:2:", "0@1700000000@1:2:", "1@-5@1:2:", "1@1700000000@", "1@1700000000@1:2",
		"1@1700000000@0:2:", "1@1700000000@3:2:", "1@1700000000@1:5:7", "1@1700000000@1:5:3,2", "1@1700000000@1:5:2,2",
		"1@1700000000@1:5:2,", "1@1700000000@+1:5:", "1@1700000000@1:18446744073709551615:", "1@1700000000@1:2:' OR true --",
		"1@1700000000@1:2:" + strings.Repeat("1,", 40<<10),
	} {
		if err := admin.CheckEventCursor(c); !errors.Is(err, admin.ErrInvalid) {
			t.Errorf("CheckEventCursor(%.40q): %v, want ErrInvalid", c, err)
		}
		if _, err := admin.ListEvents(ctx, b.op, admin.EventFilter{Cursor: c}); !errors.Is(err, admin.ErrInvalid) {
			t.Errorf("ListEvents with cursor %.40q: %v, want ErrInvalid", c, err)
		}
		if len(c) < 1000 {
			if code, _, body := b.call(t, "GET", "/api/events?before="+url.QueryEscape(c), ""); code != http.StatusBadRequest {
				t.Errorf("GET /api/events?before=%s: %d %s, want 400", c, code, body)
			}
		}
	}
	// A snapshot past the database's own is of another database.
	if _, err := admin.ListEvents(ctx, b.op, admin.EventFilter{Cursor: "5@1700000000@900000000000:900000000000:"}); !errors.Is(err, admin.ErrInvalid) ||
		!strings.Contains(err.Error(), "not of this database") {
		t.Errorf("a cursor from the future: %v", err)
	}
	if _, err := admin.ListEvents(ctx, b.op, admin.EventFilter{Cursor: "5", Before: 5}); !errors.Is(err, admin.ErrInvalid) {
		t.Errorf("cursor and before: %v", err)
	}
	if err := admin.CheckEventCursor("5@1700000000@10:20:11,15"); err != nil {
		t.Errorf("a well formed cursor: %v", err)
	}

	// A bare id (next_before before it carried a snapshot) pages by id, and
	// its page answers a cursor.
	var ids []int64
	for i := range 3 {
		ids = append(ids, b.insert(t, event{source: "stripe", id: fmt.Sprint("evt_", i), eventType: "invoice.paid", body: []byte(`{}`)}))
	}
	code, _, body := b.call(t, "GET", fmt.Sprintf("/api/events?before=%d&limit=1", ids[2]), "")
	if code != http.StatusOK || !strings.Contains(string(body), `"external_event_id": "evt_1"`) && !strings.Contains(string(body), `"external_event_id":"evt_1"`) ||
		!strings.Contains(string(body), fmt.Sprintf(`"next_before":"%d@`, ids[1])) && !strings.Contains(string(body), fmt.Sprintf(`"next_before": "%d@`, ids[1])) {
		t.Fatalf("GET /api/events?before=%d&limit=1: %d %s", ids[2], code, body)
	}
}
