package admin_test

import (
	"context"
	"net/http"
	"net/url"
	"slices"
	"testing"

	"github.com/inlet-dev/inlet/admin"
)

// TestWhereModeAfterALeadingComment
//
// Regression test (review helper-102; fixed: the text describes the behaviour
// before the fix). PostgreSQL's jsonpath lexer skips C-style comments anywhere,
// before the mode keyword too: '/* note */ strict $.o ? (@.x == 1)' is a
// valid path (payload @? answers it). admin/events.go wherePath moves the
// mode in front of its exists(…) wrapper only when the path STARTS with it
// (pathMode = `(?is)^\s*(lax|strict)\b\s*(.*)$`, admin/events.go:319); after
// a leading comment the mode stays inside `exists((/* note */ strict $.o …)
// ? …)`, which is a syntax error, and the list answers 400 "where:
// PostgreSQL rejects the JSON path: syntax error at or near " "" for a
// path PostgreSQL accepts (the same class of wrong 400 that 7bad117 fixed
// for a newline, a tab or '(' after the mode). A --where kept in a file or
// a script with a comment in front of it is refused, and the message blames
// PostgreSQL.
//
// Expected: the path is wrapped with its mode in front, as without the
// comment, and lists the matching event (200 over the API).
func TestWhereModeAfterALeadingComment(t *testing.T) {
	t.Parallel()
	b := setupAPI(t)
	ctx := context.Background()
	for _, e := range []struct{ id, body string }{
		{"evt_a", `{"n":[1,2,3],"o":{"x":null}}`},
		{"evt_b", `{"n":[],"o":{"x":1}}`},
	} {
		if _, err := b.super.Exec(ctx, `INSERT INTO webhook_ingress.events
			(provider, scheme, external_event_id, event_type, raw_body, signature_verified, payload)
			VALUES ('stripe', 'stripe', $1, 'charge.succeeded', $2, true, convert_from($2, 'UTF8')::jsonb)`,
			e.id, []byte(e.body)); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		where string
		want  []string
	}{
		{"strict $.o ? (@.x == 1)", []string{"evt_b"}}, // premise: without the comment it works
		{"/* paying customers */ strict $.o ? (@.x == 1)", []string{"evt_b"}},
		{"/* big */\nlax $.n[*] ? (@ > 2)", []string{"evt_a"}},
	} {
		var direct []string
		rows, err := b.super.Query(ctx, `SELECT external_event_id FROM webhook_ingress.events WHERE payload @? $1::jsonpath ORDER BY id DESC`, c.where)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var s string
			_ = rows.Scan(&s)
			direct = append(direct, s)
		}
		rows.Close()
		if err := rows.Err(); err != nil || !slices.Equal(direct, c.want) {
			t.Fatalf("premise: payload @? %q = %v, %v (PostgreSQL accepts the path)", c.where, direct, err)
		}
		page, err := admin.ListEvents(ctx, b.op, admin.EventFilter{Where: c.where})
		var got []string
		for _, e := range page.Events {
			got = append(got, e.ExternalEventID)
		}
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("events list --where %q: %v, %v; want %v (PostgreSQL accepts the path)", c.where, got, err, c.want)
		}
		code, _, body := b.call(t, "GET", "/api/events?where="+url.QueryEscape(c.where), "")
		if code != http.StatusOK {
			t.Errorf("GET /api/events?where=%q: %d %s; want 200", c.where, code, body)
		}
	}
}
