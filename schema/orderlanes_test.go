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
// handler's jobs in every state to 020, then moves jobs through every status
// change a service or an operator makes, and checks after each step that
// order_lanes holds exactly the ordered jobs not completed (dead: dead
// lettered), and that the claim holds back what 019's probe of jobs held back.
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
	// not completed, dead when dead lettered.
	check := func(step string, want ...string) {
		t.Helper()
		rows, _ := conn.Query(ctx, `SELECT e.external_event_id || CASE WHEN l.dead THEN ':dead' ELSE '' END
			FROM webhook_ingress.order_lanes l
			JOIN webhook_ingress.jobs j ON j.id = l.job_id AND j.event_received_at = l.event_received_at
			 AND j.handler = l.handler AND j.order_key = l.order_key AND j.order_at = l.order_at
			JOIN webhook_ingress.events e ON e.id = j.event_id ORDER BY 1`)
		got, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		var lanes, jobs int
		if err := conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM webhook_ingress.order_lanes),
			(SELECT count(*) FROM webhook_ingress.jobs WHERE order_key IS NOT NULL AND status <> 'completed')`).Scan(&lanes, &jobs); err != nil {
			t.Fatal(err)
		}
		slices.Sort(want)
		if !slices.Equal(got, want) || lanes != len(got) || jobs != lanes {
			t.Fatalf("%s: lanes %v (%d rows, %d ordered jobs not completed), want %v", step, got, lanes, jobs, want)
		}
	}
	// blocked says, per waiting job (pending or failed) of key k1 in order,
	// whether the claim (ClaimJobs, in a transaction rolled back) leaves it.
	blocked := func(step string, want string) {
		t.Helper()
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
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
		claimed, err := queries.New(tx).ClaimJobs(ctx, queries.ClaimJobsParams{LeaseHolder: "test", LeaseFor: time.Minute, FullHandlers: []string{}, BatchSize: 100})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, w := range waiting {
			leased := slices.ContainsFunc(claimed, func(c queries.ClaimJobsRow) bool { return c.ID == w.ID })
			got = append(got, fmt.Sprintf("%s=%t", w.Ext, !leased))
		}
		if g := strings.Join(got, " "); g != want {
			t.Fatalf("%s: blocked %s, want %s", step, g, want)
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
	check("after the upgrade", "e2:dead", "e3", "e4", "e7")
	var idx int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_indexes WHERE indexname LIKE 'jobs%order_lane%'`).Scan(&idx); err != nil || idx != 0 {
		t.Fatalf("019's jobs_order_lane index and its partitions' copies: %d left (%v), want none", idx, err)
	}
	blocked("after the upgrade", "e4=true")

	event("e6", "k1", 0) // arrives late, occurred first
	check("a new keyed job", "e2:dead", "e3", "e4", "e6", "e7")
	blocked("a late arrival that occurred first", "e6=false e4=true")

	set("e3", "completed")
	check("e3 completed", "e2:dead", "e4", "e6", "e7")
	set("e6", "leased")
	set("e6", "completed")
	check("e6 completed", "e2:dead", "e4", "e7")
	blocked("the dead letter blocks under block", "e4=true")
	exec(`UPDATE webhook_ingress.subscriptions SET order_policy = 'skip' WHERE handler = 'o'`)
	blocked("the dead letter does not block under skip", "e4=false")
	exec(`UPDATE webhook_ingress.subscriptions SET order_policy = 'block' WHERE handler = 'o'`)

	set("e2", "pending") // replayed
	check("e2 replayed", "e2", "e4", "e7")
	blocked("the replayed head", "e2=false e4=true")
	set("e2", "leased")
	set("e2", "failed")
	check("e2 failed", "e2", "e4", "e7")
	set("e2", "leased")
	set("e2", "dead_letter")
	check("e2 dead again", "e2:dead", "e4", "e7")
	set("e1", "pending") // a completed job replayed
	check("e1 replayed", "e1", "e2:dead", "e4", "e7")
	blocked("the replayed completed job heads its key", "e1=false e4=true")

	// The unordered handler and the keyless job never have a lane.
	var free int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM webhook_ingress.order_lanes l JOIN webhook_ingress.jobs j ON j.id = l.job_id
		WHERE j.handler = 'u' OR j.order_key IS NULL`).Scan(&free); err != nil || free != 0 {
		t.Fatalf("lanes of unordered or keyless jobs: %d (%v)", free, err)
	}
}
