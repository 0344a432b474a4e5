package admin_test

import (
	"context"
	"net/http"
	"net/url"
	"slices"
	"testing"

	"github.com/inlet-dev/inlet/admin"
)

// TestWhereModeFollowedByOtherWhitespaceOrAfterAComment
//
// Regression test (review helper-100; fixed: the text describes the behaviour
// before the fix). a --where / ?where= path that selects values and starts with its
// mode followed by a newline or a tab ("strict\n$.data.object ? (…)", as a
// path written over two lines in a shell or a YAML file is), or by a
// parenthesis ("strict($.n)"), is refused with 400 "PostgreSQL rejects the
// JSON path: syntax error at or near ..." although PostgreSQL accepts the
// path as given (payload @? answers it, and wherePath's own classification
// query ran it without error). The message blames PostgreSQL for a path
// Inlet itself broke.
//
// Expected: the path is wrapped with its mode in front, as for
// "strict $.data.object ? (…)", and lists the matching event.
//
// Root cause: admin/events.go wherePath moves a leading lax/strict in front
// of exists(…) only when it is followed by a space
// (strings.Cut(rest, " ")); any other separator leaves the mode inside
// `exists((strict\n$…) ? …)`, which is a syntax error.
func TestWhereModeFollowedByOtherWhitespaceOrAfterAComment(t *testing.T) {
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
		{"strict $.o ? (@.x == 1)", []string{"evt_b"}}, // premise: the space form works
		{"strict\n$.o ? (@.x == 1)", []string{"evt_b"}},
		{"strict\t$.o ? (@.x == 1)", []string{"evt_b"}},
		{"lax\n  $.n[*] ? (@ > 2)", []string{"evt_a"}},
		{"strict($.n[*] ? (@ > 2))", []string{"evt_a"}},
		// After a leading comment (review helper-102): the mode is read from
		// PostgreSQL's own print of the path.
		{"/* paying customers */ strict $.o ? (@.x == 1)", []string{"evt_b"}},
		{"/* big */\nlax $.n[*] ? (@ > 2)", []string{"evt_a"}},
	} {
		// What PostgreSQL answers for the path as given: it accepts it.
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
			t.Fatalf("premise: payload @? %q = %v, %v", c.where, direct, err)
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

// TestWhereUnknownVariableIs400
//
// Regression test (review helper-100; fixed: the text describes the behaviour
// before the fix). a --where path that names a variable ('$x == 1', '$.a == $min';
// the list has no way to pass variables) is answered 500 by the admin API
// (the raw "ERROR: could not find jsonpath variable" from PostgreSQL,
// SQLSTATE 42704, as an internal error), where every other path PostgreSQL
// refuses is 400 "where: PostgreSQL rejects the JSON path: …". An operator's
// typo reads as a server fault (and is logged/alerted as one).
//
// Expected: 400, naming the path problem (the list passes no variables).
//
// Root cause: admin/events.go badPath maps 42601/22xxx only; wherePath's
// classification query (jsonb_path_query_first(..., '{}', true)) fails with
// 42704 for an unknown variable, and the error is returned as is.
func TestWhereUnknownVariableIs400(t *testing.T) {
	t.Parallel()
	b := setupAPI(t)
	for _, where := range []string{`$x == 1`, `$x`} {
		code, _, body := b.call(t, "GET", "/api/events?where="+url.QueryEscape(where), "")
		if code != http.StatusBadRequest {
			t.Errorf("GET /api/events?where=%q: %d %s; want 400 (a path the list cannot run, not a server error)", where, code, body)
		}
	}
}
