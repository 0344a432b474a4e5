package admin_test

import (
	"net/http"
	"strings"
	"testing"
)

// TestBadFilterTextIsA400NotA500WithSQLState: a filter that is not text
// PostgreSQL can store is a 400 naming the parameter.
//
// Regression test (review helper-111; fixed by checkText: the text
// describes the behaviour before the fix). A filter value that is not valid text for PostgreSQL (a NUL byte,
// or bytes that are not UTF-8: ?handler=%00, ?source=%ff, or "\u0000" in a
// JSON body) reaches the database as a bound parameter and PostgreSQL
// refuses it (SQLSTATE 22021). GET /api/dlq, POST /api/replay and POST
// /api/events/verify then answer 500 with PostgreSQL's own error text
// ("list dead letters: ERROR: invalid byte sequence for encoding \"UTF8\":
// 0x00 (SQLSTATE 22021)"), and log it at ERROR as a server failure. It is a
// fault of the request itself, which the same request hits every time.
//
// Expected: 400 with a clear {"error": ...} naming the parameter, as every
// other malformed filter is (api.go documents 400 for a bad request); never
// a 500 carrying internals.
//
// Root cause: admin/dlq.go ListDeadLetters (the query error is returned as
// is), admin/replay.go and admin/verify.go Reverify likewise; api.go fail maps
// anything that is not a kindError to 500 and echoes err.Error().
func TestBadFilterTextIsA400NotA500WithSQLState(t *testing.T) {
	t.Parallel()
	b := setupAPI(t)
	b.subscribe(t, "billing", "stripe", "*", 3)
	b.insert(t, event{source: "stripe", id: "evt_bad_input", eventType: "x", body: []byte(`{"a":1}`)})
	cases := []struct{ method, path, body string }{
		{"GET", "/api/dlq?handler=%00", ""},
		{"GET", "/api/dlq?source=%ff", ""},
		{"GET", "/api/dlq?error_class=%00", ""},
		{"POST", "/api/replay", `{"handler":"\u0000","dead_letters":true}`},
		{"POST", "/api/replay", `{"handler":"billing","source":"\u0000"}`},
		{"POST", "/api/replay", `{"handler":"billing","event_type":"\u0000"}`},
		{"POST", "/api/events/verify", `{"source":"\u0000","since":"24h"}`},
	}
	for _, c := range cases {
		code, _, body := b.call(t, c.method, c.path, c.body)
		if code != http.StatusBadRequest || strings.Contains(string(body), "SQLSTATE") {
			t.Errorf("%s %s %s: %d %s\n  want 400 with a message about the request, not PostgreSQL's error text", c.method, c.path, c.body, code, body)
		}
	}
}

// TestEventsFilterErrorBlamesAWherePathThatWasNotGiven: such a filter of
// the events list is blamed on itself, not on a where= never given.
//
// Regression test (review helper-111; fixed: the text describes the
// behaviour before the fix). GET /api/events?source=%ff (or external_id=%00, type=%ff) — no
// where= at all — answers 400 "list events: where: PostgreSQL rejects the
// JSON path: invalid byte sequence ...". The operator is told their JSON
// path is wrong when they gave none; the bad parameter is not named. The
// dashboard's /dashboard/events?source=%ff shows the same message.
//
// Expected: a 400 that names the parameter at fault (source), never the
// where path when none was given.
//
// Root cause: admin/events.go ListEvents wraps every error of the list query
// in badPath (`return badPath(err)` after AdminListEvents /
// AdminListEventsWhere), and badPath turns any SQLSTATE 22xxx into "where:
// PostgreSQL rejects the JSON path".
func TestEventsFilterErrorNamesTheBadParameter(t *testing.T) {
	t.Parallel()
	b := setupAPI(t)
	b.insert(t, event{source: "stripe", id: "evt_bad_filter", eventType: "x", body: []byte(`{"a":1}`)})
	for _, p := range []string{"/api/events?source=%ff", "/api/events?external_id=%00", "/api/events?type=%ff"} {
		code, _, body := b.call(t, "GET", p, "")
		if code != http.StatusBadRequest || strings.Contains(string(body), "JSON path") || strings.Contains(string(body), "where") {
			t.Errorf("GET %s (no where=): %d %s\n  want 400 naming the bad parameter, not the JSON path", p, code, body)
		}
	}
}
