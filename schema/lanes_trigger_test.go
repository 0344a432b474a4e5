package schema_test

// What a consumer role can reach outside its handlers and scopes, through
// the schema's trigger functions.

import (
	"context"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/internal/pgtest"
	"github.com/inlet-dev/inlet/schema"
)

// order_lanes_keep is SECURITY DEFINER (it writes order_lanes as the owner).
// A role that may execute it could attach it to a table of its own (a
// temporary table: TEMP is PUBLIC's by default) and, row by row, delete or
// rewrite the lane rows of any handler's jobs as the owner. No role but the
// owner may execute it (043). (Found by a review: PUBLIC could, on the
// grounds that SQL cannot call a trigger function.)
//
// Here team A's role (scope stripe, handler team-a) tries to delete the
// lane of the head of team B's ordered handler, which would let the
// streamer's next claim lease both of that key's jobs at once.
func TestConsumerRoleCannotUseTheLanesTriggerFunction(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	// Team B: an ordered handler keyed by the customer (both events below
	// name the same one).
	if _, err := pool.Exec(ctx, schema.Query("UpsertSubscription"), "ordered-b", "github", "*", 5, nil, "data.object.customer", "block"); err != nil {
		t.Fatal(err)
	}
	teamA := newScopedConsumerRole(t, pool, [][2]string{{"stripe", "*"}}, "team-a")
	first := leakInsertEvent(t, pool, "github", "evt_b_1")
	second := leakInsertEvent(t, pool, "github", "evt_b_2")
	var headJob int64
	if err := pool.QueryRow(ctx, `SELECT id FROM webhook_ingress.jobs WHERE handler = 'ordered-b' AND event_id = $1`, first).Scan(&headJob); err != nil {
		t.Fatal(err)
	}
	var lanes int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM webhook_ingress.order_lanes WHERE handler = 'ordered-b'`).Scan(&lanes); err != nil || lanes != 2 {
		t.Fatalf("ordered-b lanes: %d, %v; want 2", lanes, err)
	}
	// Team A's role may not touch order_lanes directly.
	if err := asRole(t, pool, teamA, exec(`DELETE FROM webhook_ingress.order_lanes`)); !isPermissionDenied(err) {
		t.Fatalf("direct DELETE of order_lanes as %s: %v; want refused", teamA, err)
	}
	// Through its own temporary table and the owner's trigger function.
	err := asRoleCommit(t, pool, teamA, func(tx pgx.Tx) error {
		for _, sql := range []string{
			`CREATE TEMP TABLE lanes_attack (id bigint, event_received_at timestamptz, handler text, order_key text, order_at timestamptz, status text) ON COMMIT DROP`,
			`CREATE TRIGGER lanes_attack AFTER INSERT ON lanes_attack FOR EACH ROW EXECUTE FUNCTION webhook_ingress.order_lanes_keep()`,
		} {
			if _, err := tx.Exec(ctx, sql); err != nil {
				return err
			}
		}
		_, err := tx.Exec(ctx, `INSERT INTO lanes_attack (id, status) VALUES ($1, 'completed')`, headJob)
		return err
	})
	if err != nil {
		t.Logf("the attack was refused: %v", err)
	}
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM webhook_ingress.order_lanes WHERE handler = 'ordered-b'`).Scan(&lanes); err != nil {
		t.Fatal(err)
	}
	if lanes != 2 {
		t.Errorf("consumer role %s (scope stripe, handler team-a; no privilege on order_lanes) changed ordered-b's lanes through "+
			"webhook_ingress.order_lanes_keep() on a temp table: %d lanes left of 2", teamA, lanes)
	}
	jobs := claimAll(t, pool)
	_, headLeased := jobs["ordered-b/"+strconv.FormatInt(first, 10)]
	_, laterLeased := jobs["ordered-b/"+strconv.FormatInt(second, 10)]
	if headLeased && laterLeased {
		t.Errorf("after team A's attack the claim leased both jobs of one ordered-b key at once (events %d and %d): "+
			"the later event runs beside the earlier one", first, second)
	}
}
