package controlplane_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inlet-dev/inlet/controlplane"
	"github.com/inlet-dev/inlet/internal/pgtest"
	"github.com/inlet-dev/inlet/reporter"
)

// answerOf posts recs as token's tenant and decodes the answer, which must
// carry the arrival numbers.
func (b *testBundle) answerOf(t *testing.T, token string, recs ...reporter.Record) reporter.Answer {
	t.Helper()
	code, body := b.post(t, token, recs...)
	if code != 200 {
		t.Fatalf("post: %d %s", code, body)
	}
	var a reporter.Answer
	if err := json.Unmarshal([]byte(body), &a); err != nil {
		t.Fatalf("answer %s: %v", body, err)
	}
	if a.CursorBefore == nil || a.ArrivalBefore == nil || a.Arrival == nil {
		t.Fatalf("answer %s lacks cursor_before, arrival_before or arrival", body)
	}
	return a
}

// cursorOf is GET /api/v1/cursor as token's tenant.
func (b *testBundle) cursorOf(t *testing.T, token string) reporter.Cursor {
	t.Helper()
	code, body := b.do(t, http.MethodGet, "/api/v1/cursor", token, nil)
	if code != 200 {
		t.Fatalf("cursor: %d %s", code, body)
	}
	var c reporter.Cursor
	if err := json.Unmarshal([]byte(body), &c); err != nil || c.Arrival == nil {
		t.Fatalf("cursor %s: no arrival (%v)", body, err)
	}
	return c
}

// The control plane numbers each tenant's records in arrival order and
// answers the highest number held before and after each report, so that a
// restore that lost only a record stored under an id below the cursor (an
// attempt that committed late) shows: the cursor stays, the number falls
// (review helper-316).
func TestReportAnswerCarriesTheArrivalNumbers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	recs := func(ids ...int64) []reporter.Record {
		out := []reporter.Record{}
		for _, id := range ids {
			out = append(out, record(id, reporter.OutcomeCompleted, ""))
		}
		return out
	}
	if c := b.cursorOf(t, tokenA); c.AttemptID != 0 || *c.Arrival != 0 {
		t.Fatalf("a new tenant's cursor: %d, arrival %d; want 0, 0", c.AttemptID, *c.Arrival)
	}
	first := b.answerOf(t, tokenA, recs(1, 2, 5)...)
	if *first.ArrivalBefore != 0 || *first.Arrival <= 0 {
		t.Fatalf("first batch: arrival %d -> %d, want 0 -> above 0", *first.ArrivalBefore, *first.Arrival)
	}
	resent := b.answerOf(t, tokenA, recs(1, 2, 5)...)
	if resent.Stored != 0 || *resent.ArrivalBefore != *first.Arrival || *resent.Arrival != *first.Arrival {
		t.Fatalf("the batch again: stored %d, arrival %d -> %d; want 0, %d -> %d (nothing new numbered)",
			resent.Stored, *resent.ArrivalBefore, *resent.Arrival, *first.Arrival, *first.Arrival)
	}
	late := b.answerOf(t, tokenA, recs(3)...)
	if late.Stored != 1 || *late.CursorBefore != 5 || *late.ArrivalBefore != *first.Arrival || *late.Arrival <= *first.Arrival {
		t.Fatalf("a late record: stored %d, cursor_before %d, arrival %d -> %d; want 1, 5, %d -> higher",
			late.Stored, *late.CursorBefore, *late.ArrivalBefore, *late.Arrival, *first.Arrival)
	}
	if beta := b.answerOf(t, tokenB, recs(4)...); *beta.ArrivalBefore != 0 {
		t.Errorf("another tenant's first batch: arrival_before %d, want 0 (numbers are per tenant)", *beta.ArrivalBefore)
	}
	if c := b.cursorOf(t, tokenA); c.AttemptID != 5 || *c.Arrival != *late.Arrival {
		t.Errorf("cursor: %d, arrival %d; want 5, %d", c.AttemptID, *c.Arrival, *late.Arrival)
	}

	// A restore from a backup taken before the late record: the cursor
	// does not show it, the arrival number does.
	if _, err := b.pool.Exec(t.Context(), `DELETE FROM control_plane.attempts WHERE tenant = 'alpha' AND attempt_id = 3`); err != nil {
		t.Fatal(err)
	}
	if c := b.cursorOf(t, tokenA); c.AttemptID != 5 || *c.Arrival != *first.Arrival {
		t.Errorf("after the restore: cursor %d, arrival %d; want 5, %d", c.AttemptID, *c.Arrival, *first.Arrival)
	}
	next := b.answerOf(t, tokenA, recs(6)...)
	if *next.CursorBefore != 5 || *next.ArrivalBefore != *first.Arrival || *next.Arrival <= *late.Arrival {
		t.Errorf("after the restore: cursor_before %d, arrival %d -> %d; want 5, %d -> above %d",
			*next.CursorBefore, *next.ArrivalBefore, *next.Arrival, *first.Arrival, *late.Arrival)
	}
}

// Control-plane migration 002 on a database of an earlier release that holds
// records: they keep no arrival number (nothing rewritten), the cursor
// answers 0 for them, and records stored after it are numbered. Running its
// text again changes nothing.
func TestArrivalMigrationKeepsTheRecordsItFinds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, pgtest.NewEmptyDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	initial, err := os.ReadFile("migrations/001_initial.up.sql")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `CREATE SCHEMA control_plane;
		CREATE TABLE control_plane.schema_migrations (version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now());
		INSERT INTO control_plane.schema_migrations (version) VALUES (1);`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, string(initial)); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO control_plane.attempts (tenant, attempt_id, job, outcome, attempt, duration_ms, started_at, finished_at)
		SELECT 'alpha', g, '1', 'completed', 1, 1, now(), now() FROM generate_series(1, 5) g`); err != nil {
		t.Fatal(err)
	}
	applied, err := controlplane.Migrate(ctx, pool)
	if err != nil || len(applied) != 1 || applied[0] != 2 {
		t.Fatalf("migrate applied %v (%v), want [2]", applied, err)
	}
	arrival, err := os.ReadFile("migrations/002_arrival.up.sql")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, string(arrival)); err != nil {
		t.Fatalf("002 run again: %v", err)
	}
	var numbered int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM control_plane.attempts WHERE arrival IS NOT NULL`).Scan(&numbered); err != nil || numbered != 0 {
		t.Fatalf("%d records of the earlier release numbered (%v), want 0", numbered, err)
	}

	srv, err := controlplane.New(controlplane.Config{Pool: pool, Tenants: []controlplane.Tenant{{Name: "alpha", Token: tokenA}}})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	b := &testBundle{pool: pool, url: hs.URL}
	if c := b.cursorOf(t, tokenA); c.AttemptID != 5 || *c.Arrival != 0 {
		t.Errorf("cursor %d, arrival %d; want 5, 0", c.AttemptID, *c.Arrival)
	}
	a := b.answerOf(t, tokenA, record(4, reporter.OutcomeCompleted, ""), record(6, reporter.OutcomeCompleted, ""))
	if a.Stored != 1 || *a.CursorBefore != 5 || *a.ArrivalBefore != 0 || *a.Arrival <= 0 {
		t.Errorf("first report after the migration: stored %d, cursor_before %d, arrival %d -> %d; want 1, 5, 0 -> above 0",
			a.Stored, *a.CursorBefore, *a.ArrivalBefore, *a.Arrival)
	}
}
