package schema_test

// The per-entity order guarantee (order_key) through paths other than the
// plain claim: replays, the reaper, retries, late events, a replay racing a
// claim, and an entity key too long for order_lanes' index.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inlet-dev/inlet/internal/pgtest"
	"github.com/inlet-dev/inlet/schema/queries"
)

type orderBundle struct {
	ctx  context.Context
	pool *pgxpool.Pool
	q    *queries.Queries
}

func newOrderBundle(t *testing.T) *orderBundle {
	t.Helper()
	pool := pgtest.NewPool(t)
	return &orderBundle{ctx: context.Background(), pool: pool, q: queries.New(pool)}
}

func (b *orderBundle) exec(t *testing.T, sql string, args ...any) {
	t.Helper()
	if _, err := b.pool.Exec(b.ctx, sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// register does what consumers.Register does for handler o on stripe/*:
// UpsertSubscription with the given order key (nil: unordered).
func (b *orderBundle) register(t *testing.T, handler string, orderKey *string, policy string) {
	t.Helper()
	if _, err := b.q.UpsertSubscription(b.ctx, queries.UpsertSubscriptionParams{Handler: handler, ProviderPattern: "stripe",
		EventTypePattern: "*", MaxAttempts: 5, OrderKey: orderKey, OrderPolicy: policy}); err != nil {
		t.Fatal(err)
	}
}

// event stores a Stripe event of entity (data.object.id) that occurred at
// the given minute, and returns handler's job of it.
func (b *orderBundle) event(t *testing.T, handler, id, entity string, minute int) int64 {
	t.Helper()
	body := `{"id":"` + id + `","data":{"object":{"id":"` + entity + `"}}}`
	b.exec(t, `INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, event_type, raw_body, payload, occurred_at, signature_verified)
		VALUES ('stripe', 'stripe', $1, 'customer.subscription.updated', convert_to($2, 'UTF8'), $2::jsonb,
		        '2026-01-01'::timestamptz + make_interval(mins => $3), true)`, id, body, minute)
	var job int64
	if err := b.pool.QueryRow(b.ctx, `SELECT j.id FROM webhook_ingress.jobs j JOIN webhook_ingress.events e ON e.id = j.event_id
		WHERE e.external_event_id = $1 AND j.handler = $2`, id, handler).Scan(&job); err != nil {
		t.Fatalf("job of %s: %v", id, err)
	}
	return job
}

// claimApart is the streamer's claim of an ordered handler (031).
func (b *orderBundle) claimApart(t *testing.T, handler string) []int64 {
	t.Helper()
	rows, err := b.q.ClaimHandlerJobs(b.ctx, queries.ClaimHandlerJobsParams{Handler: handler, BatchSize: 100, LeaseHolder: "s1", LeaseFor: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	return ids(rows, func(r queries.ClaimHandlerJobsRow) int64 { return r.ID })
}

// claimWalk is claim_jobs' walk over every handler.
func (b *orderBundle) claimWalk(t *testing.T) []int64 {
	t.Helper()
	rows, err := b.q.ClaimJobs(b.ctx, queries.ClaimJobsParams{FullHandlers: []string{}, BatchSize: 100, LeaseHolder: "s1", LeaseFor: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	return ids(rows, func(r queries.ClaimJobsRow) int64 { return r.ID })
}

// entityState is, for handler's jobs of entity (data.object.id of the
// event, whatever the job's order_key says), "ext:status:key" in event-time
// order.
func (b *orderBundle) entityState(t *testing.T, handler, entity string) string {
	t.Helper()
	rows, _ := b.pool.Query(b.ctx, `SELECT e.external_event_id || ':' || j.status || ':' || coalesce(j.order_key, '<keyless>')
		FROM webhook_ingress.jobs j JOIN webhook_ingress.events e ON e.id = j.event_id
		WHERE j.handler = $1 AND e.payload #>> '{data,object,id}' = $2
		ORDER BY coalesce(e.occurred_at, e.received_at), j.id`, handler, entity)
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(got, " ")
}

// leasedOfEntity counts handler's leased jobs of entity.
func (b *orderBundle) leasedOfEntity(t *testing.T, handler, entity string) int {
	t.Helper()
	var n int
	if err := b.pool.QueryRow(b.ctx, `SELECT count(*) FROM webhook_ingress.jobs j JOIN webhook_ingress.events e ON e.id = j.event_id
		WHERE j.handler = $1 AND e.payload #>> '{data,object,id}' = $2 AND j.status = 'leased'`, handler, entity).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// checkLanes fails when order_lanes is not exactly handler's ordered jobs
// not completed (dead and leased as the jobs), or when two jobs of one key
// are leased.
func (b *orderBundle) checkLanes(t *testing.T, step string) {
	t.Helper()
	var lanes, jobs, wrong, doubled int
	if err := b.pool.QueryRow(b.ctx, `SELECT (SELECT count(*) FROM webhook_ingress.order_lanes),
		(SELECT count(*) FROM webhook_ingress.jobs WHERE order_key IS NOT NULL AND status <> 'completed'),
		(SELECT count(*) FROM webhook_ingress.order_lanes l JOIN webhook_ingress.jobs j ON j.id = l.job_id
		 WHERE l.leased <> (j.status = 'leased') OR l.dead <> (j.status = 'dead_letter')
		    OR l.order_key <> j.order_key OR l.order_at <> j.order_at OR l.handler <> j.handler),
		(SELECT count(*) FROM (SELECT handler, order_key FROM webhook_ingress.jobs WHERE order_key IS NOT NULL AND status = 'leased'
		 GROUP BY 1, 2 HAVING count(*) > 1) d)`).Scan(&lanes, &jobs, &wrong, &doubled); err != nil {
		t.Fatal(err)
	}
	if lanes != jobs || wrong != 0 || doubled != 0 {
		t.Fatalf("%s: %d lanes for %d ordered jobs not completed, %d lanes unlike their job, %d keys with two jobs leased",
			step, lanes, jobs, wrong, doubled)
	}
}

// status is job id's status.
func (b *orderBundle) status(t *testing.T, id int64) string {
	t.Helper()
	var s string
	if err := b.pool.QueryRow(b.ctx, `SELECT status FROM webhook_ingress.jobs WHERE id = $1`, id).Scan(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

func (b *orderBundle) complete(t *testing.T, id int64) {
	t.Helper()
	b.exec(t, `UPDATE webhook_ingress.jobs SET status = 'completed', completed_at = now(), lease_holder_id = NULL, lease_expires_at = NULL
		WHERE id = $1 AND status = 'leased'`, id)
}

// expire makes job id's lease run out on its last attempt, its consumer
// having taken it (worker_id: the reaper counts the attempt).
func (b *orderBundle) expireLastAttempt(t *testing.T, id int64) {
	t.Helper()
	b.exec(t, `UPDATE webhook_ingress.jobs SET lease_expires_at = now() - interval '1 second', worker_id = 'w1',
		attempt_count = max_attempts WHERE id = $1 AND status = 'leased'`, id)
}

// The paths other than the plain claim, one after another on one key, each
// followed by the claim of the handler apart (031) and the walk (claim_jobs):
// replay of a completed head while a later job runs, the reaper
// dead-lettering a lease on its last attempt (block: the key held; skip:
// the next job goes), replay of that dead letter while a later job is
// leased, a retry of the head not due while a later one is, a late earlier
// event (backfill) while a later job runs. After every step order_lanes
// matches the jobs and no key has two jobs leased.
func TestOrderHoldsThroughReplayReaperRetryAndLateEvents(t *testing.T) {
	t.Parallel()
	for _, policy := range []string{"block", "skip"} {
		t.Run(policy, func(t *testing.T) {
			t.Parallel()
			b := newOrderBundle(t)
			key := "data.object.id"
			b.register(t, "o", &key, policy)
			claim := func(step string, want ...int64) {
				t.Helper()
				got := b.claimApart(t, "o")
				got = append(got, b.claimWalk(t)...)
				slices.Sort(got)
				slices.Sort(want)
				if !slices.Equal(got, want) {
					t.Fatalf("%s: claims leased %v, want %v; key: %s", step, got, want, b.entityState(t, "o", "k"))
				}
				b.checkLanes(t, step)
			}
			e1 := b.event(t, "o", "e1", "k", 10)
			e2 := b.event(t, "o", "e2", "k", 20)
			e3 := b.event(t, "o", "e3", "k", 30)
			claim("first", e1)
			b.complete(t, e1)
			claim("e1 done", e2)

			// Replay of e1 (completed) while e2 runs: e1 waits for e2,
			// then runs before e3.
			if got, err := b.q.AdminRequeueJobs(b.ctx, queries.AdminRequeueJobsParams{JobIds: []int64{e1}}); err != nil || len(got) != 1 {
				t.Fatalf("replay e1: %v %v", got, err)
			}
			b.checkLanes(t, "e1 replayed")
			claim("e1 replayed while e2 runs")
			b.complete(t, e2)
			claim("e2 done", e1)

			// The reaper: e1's lease runs out on its last attempt.
			b.expireLastAttempt(t, e1)
			if _, err := b.q.ReapExpiredLeases(b.ctx, 100); err != nil {
				t.Fatal(err)
			}
			if s := b.status(t, e1); s != "dead_letter" {
				t.Fatalf("e1 reaped to %s", s)
			}
			b.checkLanes(t, "e1 reaped")
			if policy == "block" {
				claim("e1 dead, block")
				// Replayed: e1 first.
				if _, err := b.q.AdminRequeueJobs(b.ctx, queries.AdminRequeueJobsParams{JobIds: []int64{e1}, DeadLettersOnly: true}); err != nil {
					t.Fatal(err)
				}
				claim("e1 replayed from the DLQ", e1)
				b.complete(t, e1)
				claim("e1 done again", e3)
				b.complete(t, e3)
			} else {
				claim("e1 dead, skip", e3)
				// Replayed while e3 runs: waits for e3.
				if _, err := b.q.AdminRequeueJobs(b.ctx, queries.AdminRequeueJobsParams{JobIds: []int64{e1}, DeadLettersOnly: true}); err != nil {
					t.Fatal(err)
				}
				claim("e1 replayed from the DLQ while e3 runs")
				b.complete(t, e3)
				claim("e3 done", e1)
				b.complete(t, e1)
			}

			// A retry not yet due holds the later due job back.
			e4 := b.event(t, "o", "e4", "k", 40)
			e5 := b.event(t, "o", "e5", "k", 50)
			claim("e4 first", e4)
			b.exec(t, `UPDATE webhook_ingress.jobs SET status = 'failed', next_attempt_at = now() + interval '1 hour',
				lease_holder_id = NULL, lease_expires_at = NULL WHERE id = $1`, e4)
			b.checkLanes(t, "e4 failed")
			claim("e4 waits for its retry")
			b.exec(t, `UPDATE webhook_ingress.jobs SET next_attempt_at = now() WHERE id = $1`, e4)
			claim("e4's retry due", e4)
			b.complete(t, e4)
			claim("e4 done", e5)

			// A late earlier event (backfill, a provider's retry) while e5
			// runs: it waits for e5, then runs before e6.
			e6 := b.event(t, "o", "e6", "k", 60)
			late := b.event(t, "o", "late", "k", 45)
			claim("late arrives while e5 runs")
			b.complete(t, e5)
			claim("e5 done", late)
			b.complete(t, late)
			claim("late done", e6)
			b.complete(t, e6)
			b.checkLanes(t, "end")
		})
	}
}

// A replay that puts an earlier completed job back while another
// connection's claim is leasing the later one, the two interleaved: the
// claim (its snapshot taken before the replay committed) leases the later
// job; the replayed one then waits until that one leaves leased. Never two
// of the key leased.
func TestOrderHoldsWhenAReplayRacesAClaim(t *testing.T) {
	t.Parallel()
	b := newOrderBundle(t)
	key := "data.object.id"
	b.register(t, "o", &key, "block")
	e1 := b.event(t, "o", "e1", "k", 1)
	e2 := b.event(t, "o", "e2", "k", 2)
	if got := b.claimApart(t, "o"); !slices.Equal(got, []int64{e1}) {
		t.Fatalf("claim %v", got)
	}
	b.complete(t, e1)

	claimTx, err := b.pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer claimTx.Rollback(b.ctx)
	replayTx, err := b.pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer replayTx.Rollback(b.ctx)
	if _, err := queries.New(replayTx).AdminRequeueJobs(b.ctx, queries.AdminRequeueJobsParams{JobIds: []int64{e1}}); err != nil {
		t.Fatal(err)
	}
	rows, err := queries.New(claimTx).ClaimHandlerJobs(b.ctx, queries.ClaimHandlerJobsParams{Handler: "o", BatchSize: 100, LeaseHolder: "s2", LeaseFor: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if err := replayTx.Commit(b.ctx); err != nil {
		t.Fatal(err)
	}
	if err := claimTx.Commit(b.ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("racing claim leased %v; key: %s", ids(rows, func(r queries.ClaimHandlerJobsRow) int64 { return r.ID }), b.entityState(t, "o", "k"))
	b.checkLanes(t, "after the race")
	if got := b.claimApart(t, "o"); len(got) != 0 && b.status(t, e2) == "leased" {
		t.Fatalf("claim leased %v while e2 is leased", got)
	}
	b.checkLanes(t, "after the next claim")
}

// An event whose entity key is longer than order_lanes' index can hold (a
// long id, or a spec naming an object) is stored, and its handlers' jobs
// created, unordered ones too: before 034 its insert failed with "index row
// size exceeds btree maximum" and ingress answered 400 event_unstorable,
// which a provider does not retry. The key is then sha256:<hex> of the
// value, so the entity's events still take turns; a value of 512 bytes is
// kept as it is.
func TestLongOrderKeyValueIsStoredAndKeepsOrder(t *testing.T) {
	t.Parallel()
	b := newOrderBundle(t)
	key := "data.object.id"
	b.register(t, "o", &key, "block")
	b.register(t, "unordered", nil, "block")
	// 4,000 bytes that do not compress (no repeats).
	var sb strings.Builder
	for i := 0; sb.Len() < 4000; i++ {
		fmt.Fprintf(&sb, "%x", uint32(i)*2654435761)
	}
	long := sb.String()
	e1 := b.event(t, "o", "evt_long_1", long, 1)
	b.event(t, "o", "evt_long_2", long, 2)
	sum := sha256.Sum256([]byte(long))
	want := "sha256:" + hex.EncodeToString(sum[:])
	rows, _ := b.pool.Query(b.ctx, `SELECT j.handler || ' ' || e.external_event_id || ' ' || coalesce(j.order_key, '<keyless>')
		FROM webhook_ingress.jobs j JOIN webhook_ingress.events e ON e.id = j.event_id ORDER BY j.handler, e.external_event_id`)
	keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if w := []string{"o evt_long_1 " + want, "o evt_long_2 " + want, "unordered evt_long_1 <keyless>", "unordered evt_long_2 <keyless>"}; !slices.Equal(keys, w) {
		t.Fatalf("jobs (handler, event, order key): %q, want %q", keys, w)
	}
	if got := b.claimApart(t, "o"); !slices.Equal(got, []int64{e1}) {
		t.Fatalf("first claim leased %v, want only %d (the entity's later event waits)", got, e1)
	}
	b.checkLanes(t, "after the first claim")

	// 512 bytes: the key as sent.
	edge := strings.Repeat("k", 512)
	e3 := b.event(t, "o", "evt_edge", edge, 3)
	var got string
	if err := b.pool.QueryRow(b.ctx, `SELECT order_key FROM webhook_ingress.jobs WHERE id = $1`, e3).Scan(&got); err != nil || got != edge {
		t.Fatalf("order key of a 512-byte value: %d bytes %q… (%v), want the value itself", len(got), got[:min(len(got), 16)], err)
	}
}
