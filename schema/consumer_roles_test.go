package schema_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inlet-dev/inlet/internal/pgtest"
	"github.com/inlet-dev/inlet/schema"
	"github.com/inlet-dev/inlet/schema/queries"
)

var roleSeq atomic.Int64

// newConsumerRole makes a consumer role running handlers, with a name no
// other test of this run uses (roles are cluster-wide), dropped when the test
// ends.
func newConsumerRole(t *testing.T, pool *pgxpool.Pool, handlers ...string) string {
	t.Helper()
	ctx := context.Background()
	role := fmt.Sprintf("webhook_consumer_t%d_%d", os.Getpid(), roleSeq.Add(1))
	if _, err := queries.New(pool).CreateConsumerRole(ctx, queries.CreateConsumerRoleParams{Role: role, Handlers: handlers,
		ScopeProviders: []string{"*"}, ScopeTypes: []string{"*"}}); err != nil {
		t.Fatalf("create consumer role %s: %v", role, err)
	}
	t.Cleanup(func() {
		if _, err := queries.New(pool).DropConsumerRole(ctx, role); err != nil {
			t.Errorf("drop consumer role %s: %v", role, err)
		}
	})
	return role
}

// leasedJob is a job the streamer leased: what its reference carries.
type leasedJob struct {
	id, eventID       int64
	handler           string
	attempt           int32
	eventReceivedAt   time.Time
	leasedAt          time.Time
	provider, evtType string
}

// claimAll leases every due job as the streamer does (ClaimJobs as
// webhook_streamer, under row-level security like everyone).
func claimAll(t *testing.T, pool *pgxpool.Pool) map[string]leasedJob {
	t.Helper()
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, "SET LOCAL ROLE webhook_streamer"); err != nil {
		t.Fatal(err)
	}
	claimed, err := queries.New(tx).ClaimJobs(ctx, queries.ClaimJobsParams{
		FullHandlers: []string{}, BatchSize: 100, LeaseHolder: "streamer-1", LeaseFor: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	jobs := map[string]leasedJob{}
	for _, c := range claimed {
		j := leasedJob{id: c.ID, eventID: c.EventID, handler: c.Handler, attempt: c.AttemptCount,
			eventReceivedAt: c.EventReceivedAt, leasedAt: c.AttemptedAt, provider: c.Provider, evtType: c.EventType}
		jobs[fmt.Sprintf("%s/%d", j.handler, j.eventID)] = j
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	return jobs
}

// Two consumer roles, each running its own handler, try every statement a
// consumer has on each other's rows: claim, read, extend, complete and fail
// jobs, append history, register, refresh and disable subscriptions, say a
// handler is alive, read bodies, and go around the parent tables through a
// partition. PostgreSQL refuses or filters every one; the same statements
// on their own rows work, and the shared webhook_worker (the single-team
// setup) and the other services still see every row.
func TestConsumerRolesCannotTouchEachOthersRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)

	// Team a's handler gets stripe events, team b's github events; both get
	// acme events.
	for _, s := range [][2]string{{"team-a", "stripe"}, {"team-b", "github"}, {"team-a", "acme"}, {"team-b", "acme"}} {
		if _, err := pool.Exec(ctx, `INSERT INTO webhook_ingress.subscriptions (handler, provider_pattern) VALUES ($1, $2)`, s[0], s[1]); err != nil {
			t.Fatal(err)
		}
	}
	roles := map[string]string{
		"team-a": newConsumerRole(t, pool, "team-a"),
		"team-b": newConsumerRole(t, pool, "team-b"),
	}
	events := map[string]int64{}
	for _, p := range []string{"stripe", "github", "acme"} {
		if _, err := pool.Exec(ctx, schema.Query("InsertEvent"), p, p, "evt_"+p, "thing.happened", `{"X-Secret-Header":["`+p+`"]}`,
			[]byte(`{"body":"`+p+`"}`), true, int16(0), "/webhooks/"+p, "", false, nil, 0); err != nil {
			t.Fatal(err)
		}
		var id int64
		if err := pool.QueryRow(ctx, `SELECT id FROM webhook_ingress.events WHERE external_event_id = $1`, "evt_"+p).Scan(&id); err != nil {
			t.Fatal(err)
		}
		events[p] = id
	}
	jobs := claimAll(t, pool)
	if len(jobs) != 4 {
		t.Fatalf("the streamer leased %d jobs (%v), want 4: under row-level security it must still see every handler's", len(jobs), slices.Sorted(maps.Keys(jobs)))
	}
	job := func(handler, provider string) leasedJob {
		j, ok := jobs[fmt.Sprintf("%s/%d", handler, events[provider])]
		if !ok {
			t.Fatalf("no job of %s for the %s event", handler, provider)
		}
		return j
	}
	// Liveness and a history row of each handler, as the owner.
	for h := range roles {
		if _, err := pool.Exec(ctx, `INSERT INTO webhook_ingress.consumers (handler, worker_id, alive_until) VALUES ($1, 'c-'||$1, now() + interval '1 minute')`, h); err != nil {
			t.Fatal(err)
		}
		j := job(h, "acme")
		if _, err := pool.Exec(ctx, `INSERT INTO webhook_ingress.job_attempts (job_id, event_received_at, attempt, started_at, outcome, error)
			VALUES ($1, $2, 0, now(), 'failed', 'secret error text of '||$3)`, j.id, j.eventReceivedAt, h); err != nil {
			t.Fatal(err)
		}
	}

	for _, pair := range [][2]string{{"team-a", "team-b"}, {"team-b", "team-a"}} {
		mine, theirs := pair[0], pair[1]
		me := roles[mine]
		ownProvider := map[string]string{"team-a": "stripe", "team-b": "github"}
		t.Run(mine+" on "+theirs+"'s rows", func(t *testing.T) {
			// What it sees.
			see := []struct {
				what, sql string
				want      []string
			}{
				{"jobs", `SELECT handler || '/' || provider FROM webhook_ingress.jobs ORDER BY 1`,
					[]string{mine + "/acme", mine + "/" + ownProvider[mine]}},
				{"event bodies", `SELECT convert_from(raw_body, 'UTF8') || headers::text FROM webhook_ingress.events ORDER BY id`,
					[]string{`{"body":"` + ownProvider[mine] + `"}{"X-Secret-Header": ["` + ownProvider[mine] + `"]}`, `{"body":"acme"}{"X-Secret-Header": ["acme"]}`}},
				{"attempt history", `SELECT error FROM webhook_ingress.job_attempts`, []string{"secret error text of " + mine}},
				{"subscriptions", `SELECT handler || ' ' || provider_pattern FROM webhook_ingress.subscriptions ORDER BY 1`,
					[]string{mine + " acme", mine + " " + ownProvider[mine]}},
				{"liveness", `SELECT handler FROM webhook_ingress.consumers`, []string{mine}},
				{"its handlers", `SELECT role_name || ' ' || handler FROM webhook_ingress.consumer_roles`, []string{me + " " + mine}},
			}
			for _, s := range see {
				var got []string
				err := asRole(t, pool, me, func(tx pgx.Tx) error {
					rows, err := tx.Query(ctx, s.sql)
					if err != nil {
						return err
					}
					got, err = pgx.CollectRows(rows, pgx.RowTo[string])
					return err
				})
				if err != nil || !slices.Equal(got, s.want) {
					t.Errorf("%s reads %s: %q, %v; want %q", me, s.what, got, err, s.want)
				}
			}

			// Its own rows: every consumer statement works.
			own, ownShared := job(mine, ownProvider[mine]), job(mine, "acme")
			allowed := []struct {
				what string
				do   func(pgx.Tx) (int64, error)
				want int64
			}{
				{"read its attempt", fetch(own), 1},
				{"read its attempt of the shared event", fetch(ownShared), 1},
				{"extend its lease", queryRows(schema.Query("ExtendLease"), own.id, own.attempt, time.Minute, own.leasedAt, "c1"), 1},
				{"complete its job", complete(own), 1},
				{"fail its job", queryRows(schema.Query("FailJob"), own.id, own.attempt, "boom", "handler_error", time.Second, false, own.leasedAt, "c1"), 1},
				{"give its attempt back", giveBack(own), 1},
				{"append its history", execRows(schema.Query("InsertAttempt"), own.id, own.attempt, "c1", time.Now(), "failed", "handler_error", "boom"), 1},
				{"register its subscription", execRows(schema.Query("UpsertSubscription"), mine, "shopify", "*", 5, nil, nil, "block"), 1},
				{"disable its old subscriptions", execRows(schema.Query("DisableOtherSubscriptions"), mine, []string{"acme"}, []string{"*"}), 1},
				{"say it is alive", execRows(schema.Query("ConsumerAlive"), "c1", []string{mine}, time.Minute), 1},
				{"say it is gone", execRows(schema.Query("ConsumerGone"), "c-"+mine, []string{mine}), 1},
			}
			for _, a := range allowed {
				var n int64
				err := asRole(t, pool, me, func(tx pgx.Tx) (err error) { n, err = a.do(tx); return err })
				if err != nil || n != a.want {
					t.Errorf("%s may %s: %d rows, %v; want %d", me, a.what, n, err, a.want)
				}
			}

			// Theirs: refused (42501), or no row matches.
			other, otherShared := job(theirs, ownProvider[theirs]), job(theirs, "acme")
			attacks := []struct {
				what string
				do   func(pgx.Tx) (int64, error)
			}{
				{"read their attempt", fetch(other)},
				{"read their attempt of the shared event", fetch(otherShared)},
				{"read their event's body", queryRows(`SELECT raw_body FROM webhook_ingress.events WHERE id = $1`, other.eventID)},
				{"extend their lease", queryRows(schema.Query("ExtendLease"), other.id, other.attempt, time.Hour, other.leasedAt, "c1")},
				{"complete their job", complete(other)},
				{"complete their jobs by hand", execRows(`UPDATE webhook_ingress.jobs SET status = 'completed', completed_at = now(),
					lease_holder_id = NULL, lease_expires_at = NULL WHERE handler = $1`, theirs)},
				{"complete every job", execRows(`UPDATE webhook_ingress.jobs SET status = 'completed', completed_at = now(),
					lease_holder_id = NULL, lease_expires_at = NULL WHERE handler <> $1`, mine)},
				{"fail their job", queryRows(schema.Query("FailJob"), other.id, other.attempt, "boom", "handler_error", time.Second, true, other.leasedAt, "c1")},
				{"give their attempt back", giveBack(other)},
				{"give their attempt of the shared event back", giveBack(otherShared)},
				{"claim their job", execRows(`UPDATE webhook_ingress.jobs SET status = 'leased', lease_holder_id = 'x',
					lease_expires_at = now() + interval '1 hour' WHERE id = $1`, otherShared.id)},
				{"append to their history", execRows(schema.Query("InsertAttempt"), other.id, other.attempt, "c1", time.Now(), "failed", "x", "x")},
				{"append to their history by hand", execRows(`INSERT INTO webhook_ingress.job_attempts (job_id, event_received_at, attempt, started_at, outcome)
					VALUES ($1, $2, 1, now(), 'failed')`, other.id, other.eventReceivedAt)},
				{"register their handler", execRows(schema.Query("UpsertSubscription"), theirs, "*", "*", 5, nil, nil, "block")},
				{"disable their subscriptions", execRows(schema.Query("DisableOtherSubscriptions"), theirs, []string{}, []string{})},
				{"disable their subscriptions by hand", execRows(`UPDATE webhook_ingress.subscriptions SET enabled = false WHERE handler = $1`, theirs)},
				{"say their handler is alive", execRows(schema.Query("ConsumerAlive"), "c1", []string{theirs}, time.Hour)},
				{"say their consumer is gone", execRows(schema.Query("ConsumerGone"), "c-"+theirs, []string{theirs})},
				{"delete their liveness", execRows(`DELETE FROM webhook_ingress.consumers WHERE handler = $1`, theirs)},
				{"take their handler", execRows(`INSERT INTO webhook_ingress.consumer_roles (role_name, handler) VALUES ($1, $2)`, me, theirs)},
				{"take their handler through the function", queryRows(queries.CreateConsumerRole, me, []string{mine, theirs}, nil, nil)},
				{"widen its own scope", execRows(`INSERT INTO webhook_ingress.consumer_role_scopes (role_name, provider_pattern, event_type_pattern) VALUES (current_user, $1, $2)`, "x*", "*")},
				{"read a jobs partition", queryRows(`SELECT handler FROM webhook_ingress.jobs_default`)},
				{"read an events partition", queryRows(`SELECT raw_body FROM webhook_ingress.events_default`)},
				// SET ROLE is checked against the session's login role, not
				// current_user: the catalog says whether it could.
				{"be able to become the shared worker", queryRows(`SELECT WHERE pg_has_role($1, 'webhook_worker', 'MEMBER')`, me)},
			}
			for _, a := range attacks {
				var n int64
				err := asRole(t, pool, me, func(tx pgx.Tx) (err error) { n, err = a.do(tx); return err })
				if (err != nil && !isPermissionDenied(err)) || (err == nil && n != 0) {
					t.Errorf("%s must not %s: %d rows, %v; want no row or permission denied (42501)", me, a.what, n, err)
				}
			}
		})
	}

	// Nothing of theirs changed, and the other roles still see every row.
	var leased int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM webhook_ingress.jobs WHERE status = 'leased'`).Scan(&leased); err != nil || leased != 4 {
		t.Fatalf("%d jobs leased after the attempts, %v; want all 4 (every attempt ran in a rolled-back transaction)", leased, err)
	}
	for role, sql := range map[string]string{
		"webhook_worker":   `SELECT count(*) FROM webhook_ingress.jobs j JOIN webhook_ingress.events e ON e.id = j.event_id WHERE e.raw_body IS NOT NULL`,
		"webhook_streamer": `SELECT count(*) FROM webhook_ingress.jobs`,
		"webhook_operator": `SELECT count(*) FROM webhook_ingress.jobs JOIN webhook_ingress.subscriptions USING (handler) WHERE provider_pattern = 'acme'`,
		"webhook_auditor":  `SELECT count(*) FROM webhook_ingress.attempts a JOIN webhook_ingress.jobs j ON j.id = a.job_id`,
	} {
		var n int64
		err := asRole(t, pool, role, func(tx pgx.Tx) error { return tx.QueryRow(ctx, sql).Scan(&n) })
		want := int64(4)
		if role == "webhook_auditor" {
			want = 2 // the two history rows
		}
		if err != nil || n != want {
			t.Errorf("%s: %d rows, %v; want %d", role, n, err, want)
		}
	}
}

// fetch is the consumer's FetchJobs of j's reference; it counts the rows
// that came back with their event's body.
func fetch(j leasedJob) func(pgx.Tx) (int64, error) {
	return func(tx pgx.Tx) (int64, error) {
		rows, err := tx.Query(context.Background(), schema.Query("FetchJobs"), []int64{j.id}, []int32{j.attempt}, []string{j.handler},
			[]int64{j.eventID}, []time.Time{j.eventReceivedAt}, []time.Time{j.leasedAt})
		if err != nil {
			return 0, err
		}
		defer rows.Close()
		var n int64
		for rows.Next() {
			vals, err := rows.Values()
			if err != nil {
				return n, err
			}
			if body, _ := vals[12].([]byte); len(body) == 0 { // raw_body (occurred_at follows)
				return n, errors.New("the attempt came back without its event's body")
			}
			n++
		}
		return n, rows.Err()
	}
}

// complete is the consumer's CompleteJobs of j.
func complete(j leasedJob) func(pgx.Tx) (int64, error) {
	return queryRows(schema.Query("CompleteJobs"), []int64{j.id}, []int32{j.attempt}, []time.Time{j.eventReceivedAt},
		[]time.Time{j.leasedAt}, "c1")
}

// giveBack is the consumer's GiveBackAttempt of j (a forced stop's); it
// counts 1 when the attempt was given back.
func giveBack(j leasedJob) func(pgx.Tx) (int64, error) {
	return func(tx pgx.Tx) (int64, error) {
		given, err := queries.New(tx).GiveBackAttempt(context.Background(), queries.GiveBackAttemptParams{
			JobID: j.id, EventReceivedAt: j.eventReceivedAt, Attempt: j.attempt, LeasedAt: j.leasedAt})
		if given {
			return 1, err
		}
		return 0, err
	}
}

func queryRows(sql string, args ...any) func(pgx.Tx) (int64, error) {
	return func(tx pgx.Tx) (int64, error) {
		rows, err := tx.Query(context.Background(), sql, args...)
		if err != nil {
			return 0, err
		}
		defer rows.Close()
		var n int64
		for rows.Next() {
			n++
		}
		return n, rows.Err()
	}
}

func execRows(sql string, args ...any) func(pgx.Tx) (int64, error) {
	return func(tx pgx.Tx) (int64, error) {
		tag, err := tx.Exec(context.Background(), sql, args...)
		if err != nil {
			return 0, err
		}
		if tag.Update() || tag.Delete() || tag.Insert() || tag.Select() {
			return tag.RowsAffected(), nil
		}
		return 1, nil // SET and the like: it worked
	}
}
