package schema_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/schema"
	"github.com/inlet-dev/inlet/schema/queries"
)

// 034_order_key_bounded says "A value of at most 512 bytes is unchanged, so
// the jobs created before and after this migration agree on their keys", and
// docs/pipeline.md (Limits) that before 034 an event whose key was over 512
// bytes "was refused with 400 event_unstorable". Only a key over the
// btree entry limit (~2.7 kB) was refused: a key of 513..~2,600 bytes was
// stored as is before 034, and after it the same entity's new jobs get
// 'sha256:<hex>'. The entity's jobs leased before the upgrade and those
// created after are then in two lanes: while its job from before the upgrade
// runs, the claim leases its later job beside it (two jobs of one entity at
// once), and a dead letter from before no longer holds the later ones.
func TestReviewUpgradeTo034SplitsALongKeysLane(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, conn := migratedTo(t, 33)
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := conn.Exec(ctx, q, args...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	exec(`INSERT INTO webhook_ingress.subscriptions (handler, provider_pattern, order_key) VALUES ('o', 'stripe', 'data.object.id')`)
	key := "cus_" + strings.Repeat("x", 600) // 604 bytes: storable before 034
	event := func(id string, minute int) {
		t.Helper()
		body := `{"id":"` + id + `","data":{"object":{"id":"` + key + `"}}}`
		exec(`INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, event_type, raw_body, payload, occurred_at, signature_verified)
			VALUES ('stripe', 'stripe', $1, 'customer.updated', convert_to($2, 'UTF8'), $2::jsonb, '2026-01-01'::timestamptz + make_interval(mins => $3), true)`,
			id, body, minute)
	}
	claim := func() []int64 {
		t.Helper()
		rows, err := queries.New(conn).ClaimHandlerJobs(ctx, queries.ClaimHandlerJobsParams{Handler: "o", BatchSize: 100, LeaseHolder: "s", LeaseFor: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		return ids(rows, func(r queries.ClaimHandlerJobsRow) int64 { return r.ID })
	}

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
