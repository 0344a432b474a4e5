package schema_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/schema"
	"github.com/inlet-dev/inlet/schema/queries"
)

// Before 034 a key of 513..~2,600 bytes was stored whole (only one over the
// lanes' btree entry limit, ~2.7 kB, was refused); after it the same
// entity's new jobs get 'sha256:<hex>'. 042 gives the unfinished jobs from
// before the upgrade, and their lane rows, that key too: one entity, one
// lane, so its later job waits while the earlier one runs. (Found by a
// review: the lanes split, and the claim leased the later job beside the
// earlier one.)
func TestUpgradeAcross034KeepsALongKeysLane(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l := newLongKeyLane(t)
	conn, event, claim := l.conn, l.event, l.claim

	event("e1", 1)
	first := claim()
	if len(first) != 1 {
		t.Fatalf("claim under 033 leased %v, want e1's job", first)
	}
	if _, err := schema.Migrate(ctx, conn); err != nil {
		t.Fatal(err)
	}
	event("e2", 2) // the same entity, a later event, while e1's job runs
	if got := claim(); len(got) != 0 {
		var keys []string
		rows, _ := conn.Query(ctx, `SELECT left(order_key, 12) || '… (' || length(order_key) || ' chars) ' || status FROM webhook_ingress.jobs WHERE handler = 'o' ORDER BY id`)
		for rows.Next() {
			var k string
			_ = rows.Scan(&k)
			keys = append(keys, k)
		}
		rows.Close()
		t.Fatalf("while job %d of the entity runs, the claim after the upgrade leased %v too: two jobs of one entity at once; jobs' keys: %q",
			first[0], got, keys)
	}
}

// A job completed before the upgrade keeps its key for a replay, which puts
// it back in a lane: 042 rehashes completed jobs' long keys too, so the
// replayed job takes its place again in its entity's one lane and runs
// before the later job. (Found by a review: 042 first rehashed only
// unfinished jobs, and the replayed job ran beside its entity's later one.)
func TestReplayAcross034KeepsALongKeysLane(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l := newLongKeyLane(t)
	conn, exec, event, claim := l.conn, l.exec, l.event, l.claim

	event("e1", 1)
	first := claim()
	if len(first) != 1 {
		t.Fatalf("claim under 033 leased %v, want e1's job", first)
	}
	exec(`UPDATE webhook_ingress.jobs SET status = 'completed', completed_at = now(), lease_expires_at = NULL WHERE id = $1`, first[0])
	if _, err := schema.Migrate(ctx, conn); err != nil {
		t.Fatal(err)
	}
	event("e2", 2) // the same entity, a later event
	if _, err := queries.New(conn).AdminRequeueJobs(ctx, queries.AdminRequeueJobsParams{JobIds: first}); err != nil {
		t.Fatal(err)
	}
	if got := claim(); len(got) != 1 || got[0] != first[0] {
		t.Fatalf("after replaying job %d, the entity's earliest, the claim leased %v; want only it", first[0], got)
	}
}

// longKeyLane is a database at 033 with an ordered handler "o" keyed by
// data.object.id, and events of one entity whose key is 604 bytes (stored
// whole before 034).
type longKeyLane struct {
	conn  *pgx.Conn
	exec  func(q string, args ...any)
	event func(id string, minute int)
	claim func() []int64
}

func newLongKeyLane(t *testing.T) longKeyLane {
	t.Helper()
	ctx := context.Background()
	_, conn := migratedTo(t, 33)
	l := longKeyLane{conn: conn}
	l.exec = func(q string, args ...any) {
		t.Helper()
		if _, err := conn.Exec(ctx, q, args...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	l.exec(`INSERT INTO webhook_ingress.subscriptions (handler, provider_pattern, order_key) VALUES ('o', 'stripe', 'data.object.id')`)
	key := "cus_" + strings.Repeat("x", 600)
	l.event = func(id string, minute int) {
		t.Helper()
		body := `{"id":"` + id + `","data":{"object":{"id":"` + key + `"}}}`
		l.exec(`INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, event_type, raw_body, payload, occurred_at, signature_verified)
			VALUES ('stripe', 'stripe', $1, 'customer.updated', convert_to($2, 'UTF8'), $2::jsonb, '2026-01-01'::timestamptz + make_interval(mins => $3), true)`,
			id, body, minute)
	}
	l.claim = func() []int64 {
		t.Helper()
		rows, err := queries.New(conn).ClaimHandlerJobs(ctx, queries.ClaimHandlerJobsParams{Handler: "o", BatchSize: 100, LeaseHolder: "s", LeaseFor: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		return ids(rows, func(r queries.ClaimHandlerJobsRow) int64 { return r.ID })
	}
	return l
}
