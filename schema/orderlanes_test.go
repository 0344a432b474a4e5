package schema_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/schema"
	"github.com/inlet-dev/inlet/schema/queries"
)

// TestOrderLanesFollowTheJobs upgrades a 019 database with an ordered
// handler's jobs in every state to the latest version, then moves jobs
// through every status change a service or an operator makes, and checks
// after each step that order_lanes holds exactly the ordered jobs not
// completed (dead: dead lettered; leased: leased, 026), and that the claim
// holds back what 019's probe of jobs held back, and, since 026, a job of a
// key another job of which is leased.
func TestOrderLanesFollowTheJobs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, conn := migratedTo(t, 19)
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := conn.Exec(ctx, q, args...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	exec(`INSERT INTO webhook_ingress.subscriptions (handler, order_key, order_policy) VALUES ('o', 'data.object.id', 'block'), ('u', NULL, 'block')`)
	event := func(id, key string, minute int) {
		t.Helper()
		body := `{"id":"` + id + `","data":{"object":{}}}`
		if key != "" {
			body = `{"id":"` + id + `","data":{"object":{"id":"` + key + `"}}}`
		}
		exec(`INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, event_type, raw_body, payload, occurred_at, signature_verified)
			VALUES ('stripe', 'stripe', $1, 'customer.updated', convert_to($2, 'UTF8'), $2::jsonb, '2026-01-01'::timestamptz + make_interval(mins => $3), true)`,
			id, body, minute)
	}
	set := func(id, status string) {
		t.Helper()
		exec(`UPDATE webhook_ingress.jobs j SET status = $2,
			lease_holder_id = CASE WHEN $2 = 'leased' THEN 's1' END,
			lease_expires_at = CASE WHEN $2 = 'leased' THEN now() + interval '1 minute' END
			FROM webhook_ingress.events e WHERE e.id = j.event_id AND j.handler = 'o' AND e.external_event_id = $1`, id, status)
	}
	// check compares order_lanes with what it must hold: every ordered job
	// not completed, dead when dead lettered, leased when leased.
	check := func(step string, want ...string) {
		t.Helper()
		rows, _ := conn.Query(ctx, `SELECT e.external_event_id || CASE WHEN l.dead THEN ':dead' ELSE '' END
			|| CASE WHEN l.leased THEN ':leased' ELSE '' END
			FROM webhook_ingress.order_lanes l
			JOIN webhook_ingress.jobs j ON j.id = l.job_id AND j.event_received_at = l.event_received_at
			 AND j.handler = l.handler AND j.order_key = l.order_key AND j.order_at = l.order_at
			JOIN webhook_ingress.events e ON e.id = j.event_id ORDER BY 1`)
		got, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		var lanes, jobs, wrong int
		if err := conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM webhook_ingress.order_lanes),
			(SELECT count(*) FROM webhook_ingress.jobs WHERE order_key IS NOT NULL AND status <> 'completed'),
			(SELECT count(*) FROM webhook_ingress.order_lanes l JOIN webhook_ingress.jobs j ON j.id = l.job_id
			 WHERE l.leased <> (j.status = 'leased') OR l.dead <> (j.status = 'dead_letter'))`).Scan(&lanes, &jobs, &wrong); err != nil {
			t.Fatal(err)
		}
		slices.Sort(want)
		if !slices.Equal(got, want) || lanes != len(got) || jobs != lanes || wrong != 0 {
			t.Fatalf("%s: lanes %v (%d rows, %d ordered jobs not completed, %d whose dead or leased is not the job's), want %v",
				step, got, lanes, jobs, wrong, want)
		}
	}
	// blocked says, per waiting job (pending or failed) of key k1 in order,
	// whether the claim leaves it: through each of its paths (claim_jobs'
	// walk, claim_jobs by handler with another handler held back,
	// ClaimLimitedJobs, and claim_handler_jobs), each in a transaction rolled
	// back.
	claims := map[string]func(q *queries.Queries) ([]int64, error){
		"walk": func(q *queries.Queries) ([]int64, error) {
			rows, err := q.ClaimJobs(ctx, queries.ClaimJobsParams{LeaseHolder: "test", LeaseFor: time.Minute, FullHandlers: []string{}, BatchSize: 100})
			return ids(rows, func(r queries.ClaimJobsRow) int64 { return r.ID }), err
		},
		"by handler": func(q *queries.Queries) ([]int64, error) {
			rows, err := q.ClaimJobs(ctx, queries.ClaimJobsParams{LeaseHolder: "test", LeaseFor: time.Minute, FullHandlers: []string{"u"}, BatchSize: 100})
			return ids(rows, func(r queries.ClaimJobsRow) int64 { return r.ID }), err
		},
		"limited": func(q *queries.Queries) ([]int64, error) {
			rows, err := q.ClaimLimitedJobs(ctx, queries.ClaimLimitedJobsParams{Handler: "o", LeaseHolder: "test", LeaseFor: time.Minute, BatchSize: 100})
			return ids(rows, func(r queries.ClaimLimitedJobsRow) int64 { return r.ID }), err
		},
		"handler apart": func(q *queries.Queries) ([]int64, error) { // 031
			rows, err := q.ClaimHandlerJobs(ctx, queries.ClaimHandlerJobsParams{Handler: "o", LeaseHolder: "test", LeaseFor: time.Minute, BatchSize: 100})
			return ids(rows, func(r queries.ClaimHandlerJobsRow) int64 { return r.ID }), err
		},
	}
	blocked := func(step string, want string) {
		t.Helper()
		for path, claim := range claims {
			tx, err := conn.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			rows, _ := tx.Query(ctx, `SELECT j.id, e.external_event_id FROM webhook_ingress.jobs j JOIN webhook_ingress.events e ON e.id = j.event_id
				WHERE j.handler = 'o' AND j.order_key = 'k1' AND j.status IN ('pending', 'failed') ORDER BY j.order_at, j.id`)
			type job struct {
				ID  int64
				Ext string
			}
			waiting, err := pgx.CollectRows(rows, pgx.RowToStructByPos[job])
			if err != nil {
				t.Fatal(err)
			}
			if path == "limited" {
				// ClaimLimitedJobs claims a handler with a limits row (no
				// limit here), which the other claims pass over (061).
				if _, err := tx.Exec(ctx, `INSERT INTO webhook_ingress.handler_limits (handler) VALUES ('o')`); err != nil {
					t.Fatal(err)
				}
			}
			claimed, err := claim(queries.New(tx))
			_ = tx.Rollback(ctx)
			if err != nil {
				t.Fatalf("%s: claim (%s): %v", step, path, err)
			}
			var got []string
			for _, w := range waiting {
				got = append(got, fmt.Sprintf("%s=%t", w.Ext, !slices.Contains(claimed, w.ID)))
			}
			if g := strings.Join(got, " "); g != want {
				t.Fatalf("%s: blocked %s (claim: %s), want %s", step, g, path, want)
			}
		}
	}

	// Under 019: e1 completed, e2 dead lettered, e3 leased, e4 pending, e5
	// keyless, k2's e7 failed (waiting for its retry).
	event("e1", "k1", 1)
	event("e2", "k1", 2)
	event("e3", "k1", 3)
	event("e4", "k1", 4)
	event("e5", "", 5)
	event("e7", "k2", 1)
	set("e1", "completed")
	set("e2", "dead_letter")
	set("e3", "leased")
	set("e7", "failed")
	if _, err := schema.Migrate(ctx, conn); err != nil {
		t.Fatal(err)
	}
	check("after the upgrade", "e2:dead", "e3:leased", "e4", "e7")
	var idx int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_indexes WHERE indexname LIKE 'jobs%order_lane%'`).Scan(&idx); err != nil || idx != 0 {
		t.Fatalf("019's jobs_order_lane index and its partitions' copies: %d left (%v), want none", idx, err)
	}
	blocked("after the upgrade", "e4=true")

	event("e6", "k1", 0) // arrives late, occurred first
	check("a new keyed job", "e2:dead", "e3:leased", "e4", "e6", "e7")
	// Before 026 e6 was leased at once (nothing earlier is unfinished),
	// beside e3: it waits for e3 now.
	blocked("a late arrival that occurred first, while e3 runs", "e6=true e4=true")
	set("e3", "pending") // its lease given back (ReleaseJobs), or reaped with no consumer alive
	check("e3 released", "e2:dead", "e3", "e4", "e6", "e7")
	blocked("e3 released: the late arrival heads its key", "e6=false e3=true e4=true")
	set("e6", "leased")
	check("e6 leased", "e2:dead", "e3", "e4", "e6:leased", "e7")
	blocked("e6 runs", "e3=true e4=true")
	set("e6", "failed")
	check("e6 failed", "e2:dead", "e3", "e4", "e6", "e7")
	blocked("e6 waits for its retry", "e6=false e3=true e4=true")
	set("e6", "leased")
	set("e6", "dead_letter") // its last attempt's lease expired (the reaper)
	check("e6 dead", "e2:dead", "e3", "e4", "e6:dead", "e7")
	blocked("e6 dead under block", "e3=true e4=true")
	set("e6", "pending") // replayed
	set("e6", "leased")
	set("e6", "completed")
	check("e6 completed", "e2:dead", "e3", "e4", "e7")
	set("e3", "leased")
	set("e3", "completed")
	check("e3 completed", "e2:dead", "e4", "e7")
	blocked("the dead letter blocks under block", "e4=true")
	exec(`UPDATE webhook_ingress.subscriptions SET order_policy = 'skip' WHERE handler = 'o'`)
	blocked("the dead letter does not block under skip", "e4=false")
	set("e4", "leased")
	check("e4 leased under skip", "e2:dead", "e4:leased", "e7")
	set("e4", "pending")
	exec(`UPDATE webhook_ingress.subscriptions SET order_policy = 'block' WHERE handler = 'o'`)

	set("e2", "pending") // replayed
	check("e2 replayed", "e2", "e4", "e7")
	blocked("the replayed head", "e2=false e4=true")
	set("e2", "leased")
	check("e2 leased", "e2:leased", "e4", "e7")
	set("e2", "failed")
	check("e2 failed", "e2", "e4", "e7")
	set("e2", "leased")
	set("e2", "dead_letter")
	check("e2 dead again", "e2:dead", "e4", "e7")
	set("e1", "pending") // a completed job replayed
	check("e1 replayed", "e1", "e2:dead", "e4", "e7")
	blocked("the replayed completed job heads its key", "e1=false e4=true")

	// The services' own statements: a claim leases e1 (and k2's e7), a
	// streamer gives the leases back, a limited claim leases them again,
	// and the reaper returns the expired leases.
	q := queries.New(conn)
	claimed, err := claims["walk"](q)
	if err != nil || len(claimed) == 0 {
		t.Fatalf("claim: %v, %d jobs", err, len(claimed))
	}
	check("e1 claimed", "e1:leased", "e2:dead", "e4", "e7:leased") // and k2's head
	blocked("e1 runs", "e4=true")
	if err := q.ReleaseJobs(ctx, releaseParams(t, conn, "test", claimed)); err != nil {
		t.Fatal(err)
	}
	check("e1 released", "e1", "e2:dead", "e4", "e7")
	exec(`INSERT INTO webhook_ingress.handler_limits (handler) VALUES ('o')`) // for ClaimLimitedJobs; no limit
	if _, err := claims["limited"](q); err != nil {
		t.Fatal(err)
	}
	exec(`DELETE FROM webhook_ingress.handler_limits WHERE handler = 'o'`)
	check("e1 claimed (limited)", "e1:leased", "e2:dead", "e4", "e7:leased")
	exec(`UPDATE webhook_ingress.jobs SET lease_expires_at = now() - interval '1 second' WHERE status = 'leased'`)
	if _, err := q.ReapExpiredLeases(ctx, 100); err != nil {
		t.Fatal(err)
	}
	check("e1 reaped", "e1", "e2:dead", "e4", "e7")

	// The unordered handler and the keyless job never have a lane.
	var free int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM webhook_ingress.order_lanes l JOIN webhook_ingress.jobs j ON j.id = l.job_id
		WHERE j.handler = 'u' OR j.order_key IS NULL`).Scan(&free); err != nil || free != 0 {
		t.Fatalf("lanes of unordered or keyless jobs: %d (%v)", free, err)
	}
}

// TestUpgradeToLeasedLanesHoldsBackALateEarlierJob upgrades a live 025
// database, a keyed job leased by its claim and running, to 026: its lane is
// marked leased, and an earlier job of its key that arrives afterwards waits
// for it (before 026 the claim leased it beside the running one), while
// another key goes on.
func TestUpgradeToLeasedLanesHoldsBackALateEarlierJob(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, conn := migratedTo(t, 25)
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := conn.Exec(ctx, q, args...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	exec(`INSERT INTO webhook_ingress.subscriptions (handler, order_key) VALUES ('o', 'data.object.id')`)
	event := func(id, key string, minute int) {
		t.Helper()
		body := `{"id":"` + id + `","data":{"object":{"id":"` + key + `"}}}`
		exec(`INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, event_type, raw_body, payload, occurred_at, signature_verified)
			VALUES ('stripe', 'stripe', $1, 'customer.updated', convert_to($2, 'UTF8'), $2::jsonb, '2026-01-01'::timestamptz + make_interval(mins => $3), true)`,
			id, body, minute)
	}
	claim := func() []string {
		t.Helper()
		rows, err := queries.New(conn).ClaimJobs(ctx, queries.ClaimJobsParams{LeaseHolder: "s1", LeaseFor: time.Minute, FullHandlers: []string{}, BatchSize: 100})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, r := range rows {
			var ext string
			if err := conn.QueryRow(ctx, `SELECT external_event_id FROM webhook_ingress.events WHERE id = $1`, r.EventID).Scan(&ext); err != nil {
				t.Fatal(err)
			}
			got = append(got, ext)
		}
		slices.Sort(got)
		return got
	}

	event("a2", "k1", 2)
	if got := claim(); !slices.Equal(got, []string{"a2"}) {
		t.Fatalf("claim under 025 leased %v, want a2", got)
	}
	if _, err := schema.Migrate(ctx, conn); err != nil {
		t.Fatal(err)
	}
	rows, _ := conn.Query(ctx, `SELECT e.external_event_id FROM webhook_ingress.order_lanes l
		JOIN webhook_ingress.jobs j ON j.id = l.job_id JOIN webhook_ingress.events e ON e.id = j.event_id
		WHERE l.leased ORDER BY 1`)
	leased, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || !slices.Equal(leased, []string{"a2"}) {
		t.Fatalf("lanes leased after the upgrade: %v (%v), want a2's", leased, err)
	}

	event("a1", "k1", 1) // occurred before a2, arrives while it runs
	event("b1", "k2", 1)
	if got := claim(); !slices.Equal(got, []string{"b1"}) {
		t.Fatalf("while a2 runs the claim leased %v, want b1 only (a1 waits for a2)", got)
	}
	exec(`UPDATE webhook_ingress.jobs SET status = 'completed', lease_expires_at = NULL WHERE status = 'leased'`)
	if got := claim(); !slices.Equal(got, []string{"a1"}) {
		t.Fatalf("after a2 completed the claim leased %v, want a1", got)
	}
}

func ids[R any](rows []R, id func(R) int64) []int64 {
	var out []int64
	for _, r := range rows {
		out = append(out, id(r))
	}
	return out
}

// TestConcurrentClaimsNeverLeaseTwoJobsOfAKey: a claim that leases a key's
// job while another claim's lease of the same key is not yet committed
// cannot see that lease. Here streamer A's claim has leased a2 (its
// statement took its snapshot before a1 arrived) and not committed; a1,
// which occurred before a2, arrives; streamer B's claim sees a1 and no lease
// of its key. Before 030 B leased a1 beside a2, and the key ran two jobs at
// once. Now a claim takes a per-key lock of each keyed job it leases, and
// B passes a1 over while A's claim holds it (as SKIP LOCKED passes over a
// row); it leases a1 once a2 is done.
//
// A limited ordered handler's claim (ClaimLimitedJobs) beside the others
// is not among the pairs since 061: claim_jobs and claim_handler_jobs pass
// over a handler with a limits row, whatever the streamer's list says
// (TestClaimsPassOverALimitedHandler). Before 033 it took no key lock, and
// leased a1 beside an uncommitted a2 of claim_jobs, which then still leased
// a limited handler's jobs while the streamer's list was a round old. (Two
// limited claims take turns on the handler's limits row: B would wait for
// A's commit.)
func TestConcurrentClaimsNeverLeaseTwoJobsOfAKey(t *testing.T) {
	t.Parallel()
	// Each claim either way: claim_jobs, claim_handler_jobs (031, the
	// streamer's claim of an ordered handler apart) or ClaimLimitedJobs.
	for _, tc := range []struct{ a, b string }{{"jobs", "jobs"}, {"handler", "jobs"}, {"jobs", "handler"}, {"handler", "handler"}} {
		t.Run("A "+tc.a+", B "+tc.b, func(t *testing.T) {
			t.Parallel()
			concurrentClaimsOfAKey(t, tc.a, tc.b)
		})
	}
}

func concurrentClaimsOfAKey(t *testing.T, byA, byB string) {
	ctx := context.Background()
	url, conn := migratedTo(t, schema.Latest())
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := conn.Exec(ctx, q, args...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	exec(`INSERT INTO webhook_ingress.subscriptions (handler, order_key) VALUES ('o', 'data.object.id')`)
	event := func(id, key string, minute int) {
		t.Helper()
		body := `{"id":"` + id + `","data":{"object":{"id":"` + key + `"}}}`
		exec(`INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, event_type, raw_body, payload, occurred_at, signature_verified)
			VALUES ('stripe', 'stripe', $1, 'customer.updated', convert_to($2, 'UTF8'), $2::jsonb, '2026-01-01'::timestamptz + make_interval(mins => $3), true)`,
			id, body, minute)
	}
	claim := func(q queries.DBTX, holder string) []string {
		t.Helper()
		by := byA
		if holder == "B" {
			by = byB
		}
		var rows []queries.ClaimJobsRow
		switch by {
		case "handler":
			hrows, err := queries.New(q).ClaimHandlerJobs(ctx, queries.ClaimHandlerJobsParams{Handler: "o", LeaseHolder: holder, LeaseFor: time.Minute, BatchSize: 100})
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range hrows {
				rows = append(rows, queries.ClaimJobsRow(r))
			}
		default:
			var err error
			rows, err = queries.New(q).ClaimJobs(ctx, queries.ClaimJobsParams{LeaseHolder: holder, LeaseFor: time.Minute, FullHandlers: []string{}, BatchSize: 100})
			if err != nil {
				t.Fatal(err)
			}
		}
		var got []string
		for _, r := range rows {
			var ext string
			if err := conn.QueryRow(ctx, `SELECT external_event_id FROM webhook_ingress.events WHERE id = $1`, r.EventID).Scan(&ext); err != nil {
				t.Fatal(err)
			}
			got = append(got, ext)
		}
		slices.Sort(got)
		return got
	}
	connect := func() *pgx.Conn {
		t.Helper()
		c, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close(context.Background()) })
		return c
	}
	streamerA, streamerB := connect(), connect()

	event("a2", "k1", 2)
	txA, err := streamerA.Begin(ctx) // A's claim, not yet committed
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = txA.Rollback(ctx) }()
	if got := claim(txA, "A"); !slices.Equal(got, []string{"a2"}) {
		t.Fatalf("A leased %v, want a2", got)
	}
	event("a1", "k1", 1) // occurred before a2, arrives while A's claim commits
	event("b1", "k2", 1)
	if got := claim(streamerB, "B"); !slices.Equal(got, []string{"b1"}) {
		t.Fatalf("B, while A's lease of a2 is not committed, leased %v, want b1 only (a1's key is being leased by A)", got)
	}
	if err := txA.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	var leased int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM webhook_ingress.jobs WHERE order_key = 'k1' AND status = 'leased'`).Scan(&leased); err != nil {
		t.Fatal(err)
	}
	if leased != 1 {
		t.Fatalf("%d jobs of key k1 leased at once, want 1", leased)
	}
	if got := claim(streamerB, "B"); len(got) != 0 {
		t.Fatalf("while a2 runs B leased %v, want nothing", got)
	}
	exec(`UPDATE webhook_ingress.jobs SET status = 'completed', lease_expires_at = NULL WHERE order_key = 'k1' AND status = 'leased'`)
	if got := claim(streamerB, "B"); !slices.Equal(got, []string{"a1"}) {
		t.Fatalf("after a2 completed B leased %v, want a1", got)
	}
}
