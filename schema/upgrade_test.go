package schema_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inlet-dev/inlet/consumers"
	"github.com/inlet-dev/inlet/consumers/bus"
	"github.com/inlet-dev/inlet/internal/database"
	"github.com/inlet-dev/inlet/internal/testwait"
	"github.com/inlet-dev/inlet/schema"
	"github.com/inlet-dev/inlet/schema/queries"
	"github.com/inlet-dev/inlet/streamer"
)

// TestUpgradeToLeaseTokensLosesNothing upgrades a live installation from the
// protocol of 009 (the consumer's take wrote worker_id; every attempt wrote a
// history row) to 010's, with jobs in every state, and runs services of both
// versions side by side, as a rolling upgrade does:
//
//	job 1  leased and taken by an old consumer that then died
//	job 2  leased and taken by an old consumer that finishes after the upgrade
//	job 3  leased, its (old-format) reference still on the bus
//	job 4  leased, its reference lost
//	job 5  failed, due again: leased by a new streamer, run by an old consumer
//	job 6  pending: leased by an old streamer, run by a new consumer
//
// Every job ends completed, each success recorded exactly once.
func TestUpgradeToLeaseTokensLosesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, conn := migratedTo(t, 9)
	old, err := schema.LoadQueries(os.DirFS("testdata/protocol009"))
	if err != nil {
		t.Fatal(err)
	}
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := conn.Exec(ctx, q, args...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	exec(`INSERT INTO webhook_ingress.subscriptions (handler, max_attempts) VALUES ('h', 5)`)
	for i := 1; i <= 6; i++ {
		exec(insertEvent, fmt.Sprintf("evt_upgrade_%d", i))
	}
	open := func(role string) *pgxpool.Pool {
		t.Helper()
		p, err := database.Open(ctx, url, database.Options{Role: role, AppName: "upgrade-test-" + role})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		return p
	}
	spool, wpool := open("webhook_streamer"), open("webhook_worker")

	// The old streamer leases jobs 1-4 (for 2s).
	oldClaim := func(n int) []bus.Ref {
		t.Helper()
		rows, err := spool.Query(ctx, old["ClaimJobs"], n, "old-streamer", 2*time.Second, 5000)
		if err != nil {
			t.Fatal(err)
		}
		refs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (bus.Ref, error) {
			var ref bus.Ref
			err := r.Scan(&ref.JobID, &ref.EventID, &ref.Handler, &ref.Provider, &ref.EventType, &ref.Attempt,
				new(int), new(time.Time), new(string), &ref.EventReceivedAt)
			return ref, err
		})
		if err != nil || len(refs) != n {
			t.Fatalf("old claim: %v, %d references, want %d", err, len(refs), n)
		}
		return refs
	}
	refs := oldClaim(4)
	// An old consumer takes an attempt: it writes worker_id and returns the
	// start and the lease time it fences its outcome on.
	oldTake := func(ref bus.Ref, worker string) (started, leasedAt time.Time) {
		t.Helper()
		err := wpool.QueryRow(ctx, old["TakeJob"], ref.JobID, ref.Attempt, ref.Handler, worker, ref.EventID, 2*time.Second).Scan(
			new(int), new(int), &started, &leasedAt, new(time.Time), new(*int64), new(string), new(string), new(string),
			new(string), new(time.Time), new(map[string][]string), new([]byte))
		if err != nil {
			t.Fatalf("old take of job %d: %v", ref.JobID, err)
		}
		return started, leasedAt
	}
	oldComplete := func(ref bus.Ref, worker string, started, leasedAt time.Time) {
		t.Helper()
		err := pgx.BeginFunc(ctx, wpool, func(tx pgx.Tx) error {
			tag, err := tx.Exec(ctx, old["CompleteJob"], ref.JobID, ref.Attempt, leasedAt)
			if err != nil || tag.RowsAffected() != 1 {
				return fmt.Errorf("complete: %v, %d rows", err, tag.RowsAffected())
			}
			_, err = tx.Exec(ctx, old["InsertAttempt"], ref.JobID, ref.Attempt, worker, started, "completed", nil, nil)
			return err
		})
		if err != nil {
			t.Fatalf("old consumer completing job %d: %v", ref.JobID, err)
		}
	}
	oldTake(refs[0], "old-dead")
	started2, leased2 := oldTake(refs[1], "old-live")
	exec(`UPDATE webhook_ingress.jobs SET status = 'failed', attempt_count = 1, next_attempt_at = now(),
		last_error = 'boom', last_error_class = 'handler_error' WHERE id = 5`)

	if _, err := schema.Migrate(ctx, conn); err != nil {
		t.Fatal(err)
	}

	// Side by side: the old consumer finishes its attempt on the new schema;
	// an old streamer leases job 6; a new claim leases job 5 and an old
	// consumer runs it.
	oldComplete(refs[1], "old-live", started2, leased2)
	ref6 := oldClaim(1)[0]
	if ref6.JobID != 6 {
		t.Fatalf("old claim leased job %d, want 6", ref6.JobID)
	}
	var ref5 bus.Ref
	claimed, err := queries.New(spool).ClaimJobs(ctx, queries.ClaimJobsParams{
		FullHandlers: []string{}, BatchSize: 1, LeaseHolder: "new-streamer", LeaseFor: time.Minute})
	if err != nil || len(claimed) != 1 || claimed[0].ID != 5 {
		t.Fatalf("new claim: %v, leased %+v, want job 5", err, claimed)
	}
	j := claimed[0]
	ref5 = bus.Ref{JobID: j.ID, EventID: j.EventID, Handler: j.Handler, Provider: j.Provider, EventType: j.EventType,
		Attempt: int(j.AttemptCount), LeaseExpiresAt: j.LeaseExpiresAt, EventReceivedAt: j.EventReceivedAt, LeasedAt: j.AttemptedAt}
	started5, leased5 := oldTake(ref5, "old-live")
	if !leased5.Equal(ref5.LeasedAt) {
		t.Fatalf("old take fenced on %s, the new reference carries %s", leased5, ref5.LeasedAt)
	}
	oldComplete(ref5, "old-live", started5, leased5)

	// The new services.
	ps := bus.NewGoChannel(slog.New(slog.DiscardHandler))
	defer ps.Close()
	var mu sync.Mutex
	calls := map[int64]int{}
	svc, err := consumers.New(consumers.Config{Pool: wpool, Subscriber: ps, WorkerID: "new-consumer", Logger: slog.New(slog.DiscardHandler),
		Handlers: []consumers.Handler{{Name: "h", Func: func(_ context.Context, e *consumers.Event) error {
			mu.Lock()
			calls[e.JobID]++
			mu.Unlock()
			return nil
		}}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := svc.Stop(ctx); err != nil {
			t.Error(err)
		}
	}()
	str, err := streamer.New(streamer.Config{Pool: spool, Publisher: ps, LeaseDuration: 2 * time.Second,
		ReapInterval: 100 * time.Millisecond, PollInterval: 50 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := str.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer str.Stop()
	// Old-format references (no lease token) still on the bus.
	for _, ref := range []bus.Ref{refs[2], ref6} {
		msg, err := bus.NewMessage(ref)
		if err != nil {
			t.Fatal(err)
		}
		if err := ps.Publish(bus.Topic(ref.Handler), msg); err != nil {
			t.Fatal(err)
		}
	}

	testwait.Eventually(t, 30*time.Second, "all 6 jobs completed after the upgrade", func() (bool, string) {
		var done int
		var states string
		if err := conn.QueryRow(ctx, `SELECT count(*) FILTER (WHERE status = 'completed'),
			string_agg(id || ':' || status || '/' || attempt_count, ' ' ORDER BY id) FROM webhook_ingress.jobs`).Scan(&done, &states); err != nil {
			t.Fatal(err)
		}
		return done == 6, states
	})
	// Each success once: from the old consumer's history row (jobs 2, 5) or
	// from the job row.
	rows, err := conn.Query(ctx, `SELECT job_id, count(*), min(worker_id) FROM webhook_ingress.attempts
		WHERE outcome = 'completed' GROUP BY job_id ORDER BY job_id`)
	if err != nil {
		t.Fatal(err)
	}
	type success struct {
		Job    int64
		N      int64
		Worker string
	}
	got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[success])
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 6 {
		t.Fatalf("successes %+v, want one for each of 6 jobs", got)
	}
	for _, s := range got {
		want := "new-consumer"
		if s.Job == 2 || s.Job == 5 {
			want = "old-live"
		}
		if s.N != 1 || s.Worker != want {
			t.Errorf("job %d: %d successes by %s, want 1 by %s", s.Job, s.N, s.Worker, want)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if calls[2] != 0 || calls[5] != 0 || calls[3] != 1 || calls[6] != 1 {
		t.Errorf("new consumer's handler calls %v: want none for jobs 2 and 5, one each for 3 and 6", calls)
	}
	// The attempt the dead old consumer took counts, and says why it ended.
	var expired int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM webhook_ingress.job_attempts
		WHERE job_id = 1 AND outcome = 'lease_expired' AND worker_id = 'old-dead'`).Scan(&expired); err != nil || expired != 1 {
		t.Errorf("job 1: %d lease_expired attempts by old-dead (%v), want 1", expired, err)
	}
}
