package admin_test

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/inlet-dev/inlet/admin"
)

// TestWherePathOverMaxLengthIsInvalid (review helper-178, fixed; this
// describes the code before the fix): a --where path longer than
// admin.MaxWhereBytes is a bad request (ErrInvalid, 400), refused before
// PostgreSQL is asked, never a 500; the longest allowed still runs.
//
// Defect: a --where JSON path that PostgreSQL rejects with SQLSTATE 54001
// ("stack depth limit exceeded") was not reported as a bad path. A plain
// accessor chain of some tens of thousands of steps ('$.a.a.a…a == 1',
// ~100 KB, well under the API's 1 MiB header limit) is refused by
// PostgreSQL while it parses the jsonpath: the parser's tree is flattened
// recursively and hits max_stack_depth. admin.badPath mapped only syntax
// (42601), undefined-variable (42704) and data (22xxx) errors to
// ErrInvalid, so ListEvents returned the raw PgError: the admin API
// answered 500 and logged "admin request failed" at ERROR level, and the
// CLI printed a bare "stack depth limit exceeded (SQLSTATE 54001)". This
// test failed so before the fix; EventFilter.Where's doc and the API's
// contract promise ErrInvalid and 400.
func TestWherePathOverMaxLengthIsInvalid(t *testing.T) {
	t.Parallel()
	b := setupAPI(t)
	whereSetup(t, b.testBundle)
	deep := "$" + strings.Repeat(".a", 50000) + " == 1"

	_, err := admin.ListEvents(context.Background(), b.op, admin.EventFilter{Where: deep})
	if err == nil {
		t.Fatal("ListEvents accepted a path PostgreSQL cannot parse")
	}
	if !errors.Is(err, admin.ErrInvalid) || !strings.Contains(err.Error(), "where") {
		t.Errorf("ListEvents with a %d-byte accessor chain: error %q is not ErrInvalid naming where (a path PostgreSQL rejects must be a clear bad-path error)",
			len(deep), err)
	}

	code, _, body := b.call(t, http.MethodGet, "/api/events?where="+url.QueryEscape(deep), "")
	if code != http.StatusBadRequest {
		t.Errorf("GET /api/events?where=<deep path>: status %d, want 400; body %.300s", code, body)
	}

	// The longest path allowed still reaches PostgreSQL and is answered.
	longest := "$.data.object.customer == \"" + strings.Repeat("x", admin.MaxWhereBytes-len("$.data.object.customer == \"\"")) + "\""
	if len(longest) != admin.MaxWhereBytes {
		t.Fatalf("setup: path of %d bytes, want %d", len(longest), admin.MaxWhereBytes)
	}
	if page, err := admin.ListEvents(context.Background(), b.op, admin.EventFilter{Where: longest}); err != nil || len(page.Events) != 0 {
		t.Errorf("ListEvents with a %d-byte path (the maximum): %d events, error %v; want none and no error", len(longest), len(page.Events), err)
	}
}

// TestWherePathPostgresRefusesForDepthIsInvalid proves that a --where path
// within MaxWhereBytes that PostgreSQL refuses for one of its program
// limits (class 54: here 54001, stack depth limit exceeded, with the
// database's max_stack_depth at its minimum, as a DBA may set it) is
// ErrInvalid with PostgreSQL's message and 400 on GET /api/events, not a
// 500 and an ERROR log. It failed before the fix (badPath left class 54
// to the caller: "list events: ERROR: stack depth limit exceeded (SQLSTATE
// 54001)", 500).
func TestWherePathPostgresRefusesForDepthIsInvalid(t *testing.T) {
	t.Parallel()
	b := setupAPI(t)
	whereSetup(t, b.testBundle)
	ctx := context.Background()
	// Each test has its own database; the operator's pool is emptied so
	// its next connections start with the lowered limit.
	var db string
	if err := b.super.QueryRow(ctx, `SELECT current_database()`).Scan(&db); err != nil {
		t.Fatal(err)
	}
	b.exec(t, `ALTER DATABASE "`+db+`" SET max_stack_depth = '100kB'`)
	b.op.Reset()
	deep := "$" + strings.Repeat(".a", (admin.MaxWhereBytes-len("$ == 1"))/2) + " == 1"

	_, err := admin.ListEvents(ctx, b.op, admin.EventFilter{Where: deep})
	if !errors.Is(err, admin.ErrInvalid) || !strings.Contains(err.Error(), "PostgreSQL rejects the JSON path: stack depth limit exceeded") {
		t.Errorf("ListEvents with a %d-byte accessor chain over max_stack_depth: error %v, want ErrInvalid "+
			"\"where: PostgreSQL rejects the JSON path: stack depth limit exceeded\"", len(deep), err)
	}
	code, _, body := b.call(t, http.MethodGet, "/api/events?where="+url.QueryEscape(deep), "")
	if code != http.StatusBadRequest {
		t.Errorf("GET /api/events?where=<deep path>: status %d, want 400; body %.300s", code, body)
	}
}
