package tests

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/internal/pgtest"
)

func reviewEventsDB(t *testing.T) []string {
	t.Helper()
	ctx := context.Background()
	dbURL := pgtest.NewDatabase(t)
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `INSERT INTO webhook_ingress.events
		(provider, scheme, external_event_id, event_type, raw_body, payload, signature_verified, occurred_at) VALUES
		('stripe', 'stripe', 'evt_rv_1', 'invoice.paid', '{"type":"invoice.paid","data":{"object":{"customer":"cus_123"}}}',
		 '{"type":"invoice.paid","data":{"object":{"customer":"cus_123"}}}', true, now() - interval '1 hour')`); err != nil {
		t.Fatal(err)
	}
	return cleanEnv("DATABASE_URL=" + dbURL)
}

// Regression test for a defect found by review helper-92 (fixed; the
// text below describes the behaviour before the fix).
//
// TestEventsListRefusesAnInvertedOccurredRange: `inlet events list
// --since B --until A` with B after A is a usage error (exit 2, "since (...)
// must be before until (...)", admin.checkRange via checkPage), but the same
// mistake with --occurred-after / --occurred-before is accepted and answers
// "no events match" with exit 0: an auditor who swapped the two bounds is
// told, wrongly, that nothing happened in the window. admin.ListEvents
// (admin/events.go: checkPage(f.Limit, f.Before, "event", f.Since, f.Until))
// checks only the received_at range, never OccurredAfter/OccurredBefore.
//
// Expected: exit 2 naming the occurred-after/occurred-before bounds, as for
// --since/--until. Suggested fix: in ListEvents also call
// checkRange(f.OccurredAfter, f.OccurredBefore) (with its own wording).
func TestEventsListRefusesAnInvertedOccurredRange(t *testing.T) {
	t.Parallel()
	env := reviewEventsDB(t)

	_, sinceErr, sinceCode := runInlet(t, env, "events", "list", "--since", "1h", "--until", "2h")
	if sinceCode != 2 {
		t.Fatalf("control: inverted --since/--until: exit %d, want 2\n%s", sinceCode, sinceErr)
	}
	out, errOut, code := runInlet(t, env, "events", "list", "--occurred-after", "1h", "--occurred-before", "2h")
	if code != 2 {
		t.Errorf("inlet events list --occurred-after 1h --occurred-before 2h (an empty window, bounds swapped): exit %d, want 2 "+
			"as for --since 1h --until 2h (%s)\nstdout: %s\nstderr: %s", code, strings.TrimSpace(sinceErr), out, errOut)
	}
}

// Regression test for a defect found by review helper-92 (fixed; the
// text below describes the behaviour before the fix).
//
// TestEventsListWhereRefusesAPathThatIsNotAPredicate: --where
// is evaluated with PostgreSQL's @@ (schema/queries/admin.sql,
// `e.payload @@ sqlc.arg(where_path)::jsonpath`), which yields NULL, not an
// error, for a path that is not a predicate: the filter-expression form
// every jsonpath guide (and @?, jsonb_path_exists) uses,
// `$.data.object ? (@.customer == "cus_123")`, or a plain path `$.type`.
// --help promises "a path PostgreSQL rejects is a usage error with its
// message", so an operator reads "no events match" (exit 0) as the answer,
// although the stored event has exactly that customer.
//
// Expected: either the event is listed (a non-predicate path treated as
// "exists", as @? does) or a usage error saying --where needs a predicate
// (`$.data.object.customer == "cus_123"`). Suggested fix: in
// admin.ListEvents, before the query, check the path is a predicate, e.g.
// `SELECT jsonb_path_match('{}'::jsonb, $1::jsonpath)` (not silent: a
// non-predicate raises "single boolean result is expected", which badPath
// can turn into ErrInvalid), or evaluate a non-predicate path with @?.
func TestEventsListWhereRefusesAPathThatIsNotAPredicate(t *testing.T) {
	t.Parallel()
	env := reviewEventsDB(t)

	out, errOut, code := runInlet(t, env, "events", "list", "--where", `$.data.object.customer == "cus_123"`)
	if code != 0 || !strings.Contains(out, "evt_rv_1") {
		t.Fatalf("control: the predicate form: exit %d\n%s%s", code, out, errOut)
	}
	for _, where := range []string{`$.data.object ? (@.customer == "cus_123")`, `$.type`} {
		out, errOut, code := runInlet(t, env, "events", "list", "--where", where)
		if code == 0 && !strings.Contains(out, "evt_rv_1") {
			t.Errorf("inlet events list --where %q: exit 0 and %q although the stored event matches it; "+
				"want the event listed, or a usage error that --where needs a predicate\nstderr: %s", where, strings.TrimSpace(out), errOut)
		}
	}
}
