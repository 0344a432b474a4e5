package consumers_test

// Attacks on the transactional handler's exactly-once effects (TxFunc),
// beyond tx_test.go (from a review that tried to break them and could not). Each one holds a transactional attempt open at
// a chosen point while another actor (the reaper, a replay, a give-back, a
// duplicate delivery on a non-transactional replica) moves the job, and
// checks that the job's effects are committed at most once and that the
// stale attempt's outcome does not overwrite the newer one.

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/consumers"
	"github.com/inlet-dev/inlet/consumers/bus"
	"github.com/inlet-dev/inlet/consumers/internal/consumertest"
	"github.com/inlet-dev/inlet/schema/queries"
)

// gatedCalls hands out, per handler call in call order, a channel the call
// waits on; calls beyond the gates made run straight through.
type gatedCalls struct {
	mu      sync.Mutex
	n       int
	gates   []chan struct{}
	started chan int // call index, once its writes are made
}

func newGatedCalls(gated int) *gatedCalls {
	g := &gatedCalls{started: make(chan int, 16)}
	for range gated {
		g.gates = append(g.gates, make(chan struct{}))
	}
	return g
}

func (g *gatedCalls) wait(ctx context.Context) error {
	g.mu.Lock()
	i := g.n
	g.n++
	g.mu.Unlock()
	g.started <- i
	if i < len(g.gates) {
		select {
		case <-g.gates[i]:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

func (g *gatedCalls) next(t *testing.T) int {
	t.Helper()
	select {
	case i := <-g.started:
		return i
	case <-time.After(wait):
		t.Fatal("no handler call started")
		return -1
	}
}

// A transactional attempt (attempt 1, leased at t1) has written its effects
// and waits, its transaction open, while its lease is taken from it by each
// of the ways the protocol has, and the job is leased again under the SAME
// attempt number (1, leased at t2): only the lease time tells the two
// attempts apart. A second attempt (the new lease) runs and waits too. The
// stale attempt is let go first and must be fenced out (rolled back); the
// new one commits. Exactly one row of effects.
func TestTxSameAttemptNumberReLeasedWhileTxOpen(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		yank func(ctx context.Context, t *testing.T, b *testBundle, ref bus.Ref)
	}{
		{"reaped then replayed by an operator (AdminRequeueJobs)", func(ctx context.Context, t *testing.T, b *testBundle, ref bus.Ref) {
			expireAndReap(ctx, t, b, ref.JobID)
			if err := consumertest.AsRole(ctx, b.Admin, "webhook_operator", func(tx pgx.Tx) error {
				ids, err := queries.New(tx).AdminRequeueJobs(ctx, queries.AdminRequeueJobsParams{JobIds: []int64{ref.JobID}})
				if err == nil && len(ids) != 1 {
					t.Errorf("replay re-queued %v", ids)
				}
				return err
			}); err != nil {
				t.Fatal(err)
			}
		}},
		{"given back by the streamer after a failed publish (ReleaseJobs)", func(ctx context.Context, t *testing.T, b *testBundle, ref bus.Ref) {
			if err := consumertest.AsRole(ctx, b.Admin, "webhook_streamer", func(tx pgx.Tx) error {
				return queries.New(tx).ReleaseJobs(ctx, queries.ReleaseJobsParams{JobIds: []int64{ref.JobID}, LeaseHolder: "test-streamer",
					Attempts: []int32{int32(ref.Attempt)}, LeasedAt: []time.Time{ref.LeasedAt}})
			}); err != nil {
				t.Fatal(err)
			}
		}},
		{"given back by a duplicate delivery's forced stop (GiveBackAttempt)", func(ctx context.Context, t *testing.T, b *testBundle, ref bus.Ref) {
			if err := consumertest.AsRole(ctx, b.Admin, "webhook_worker", func(tx pgx.Tx) error {
				given, err := queries.New(tx).GiveBackAttempt(ctx, queries.GiveBackAttemptParams{
					JobID: ref.JobID, EventReceivedAt: ref.EventReceivedAt, Attempt: int32(ref.Attempt), LeasedAt: ref.LeasedAt})
				if err == nil && !given {
					t.Errorf("lease not given back")
				}
				return err
			}); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b := setup(t)
			effects(t, b)
			g := newGatedCalls(2)
			b.start(t, b.config(consumers.Handler{Name: "ledger", Concurrency: 4, MaxAttempts: 5, Backoff: noBackoff,
				TxFunc: func(ctx context.Context, tx pgx.Tx, e *consumers.Event) error {
					if err := write(ctx, tx, e); err != nil {
						return err
					}
					return g.wait(ctx)
				}}))
			stale := publishOne(t, b)
			if i := g.next(t); i != 0 {
				t.Fatalf("call %d", i)
			}
			c.yank(ctx, t, b, stale)
			again := b.ClaimOnce(t, time.Minute)
			if len(again) != 1 {
				t.Fatalf("re-claimed %+v", again)
			}
			fresh := again[0]
			if fresh.Attempt != stale.Attempt || fresh.LeasedAt.Equal(stale.LeasedAt) {
				t.Fatalf("want the same attempt number under a new lease time: stale %d@%v, fresh %d@%v",
					stale.Attempt, stale.LeasedAt, fresh.Attempt, fresh.LeasedAt)
			}
			if err := b.Publish(fresh); err != nil {
				t.Fatal(err)
			}
			if i := g.next(t); i != 1 {
				t.Fatalf("call %d", i)
			}
			// Both attempts have written, in two open transactions. The stale
			// one finishes first.
			close(g.gates[0])
			b.waitLogged(t, "handler's transaction rolled back: the job's lease was lost", 1)
			if got := effectRows(t, b, stale.JobID); len(got) != 0 {
				t.Fatalf("the stale attempt's effects were committed: %v", got)
			}
			if j := b.Job(t, stale.JobID); j.Status != "leased" {
				t.Fatalf("the stale attempt changed the new lease: job %+v", j)
			}
			close(g.gates[1])
			b.WaitJobStatus(t, stale.JobID, "completed", wait)
			if got := effectRows(t, b, stale.JobID); len(got) != 1 {
				t.Fatalf("effects committed %d times (attempts %v), want once", len(got), got)
			}
		})
	}
}

// A transactional handler that runs its transaction REPEATABLE READ (its
// first statement says so, or the role's default_transaction_isolation):
// its completion reads the job on the transaction's snapshot, taken when the
// lease was still its own. The lease is reaped and re-leased, and the new
// attempt commits, while the stale one's transaction is open; then the stale
// one returns nil. Its completion must fail (a serialization failure), not
// complete the job on the old snapshot, and its failure must not be
// recorded over the new attempt's success.
func TestTxRepeatableReadStaleAttempt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	effects(t, b)
	g := newGatedCalls(1)
	b.start(t, b.config(consumers.Handler{Name: "ledger", Concurrency: 4, MaxAttempts: 5, Backoff: noBackoff,
		TxFunc: func(ctx context.Context, tx pgx.Tx, e *consumers.Event) error {
			if _, err := tx.Exec(ctx, `SET TRANSACTION ISOLATION LEVEL REPEATABLE READ`); err != nil {
				return err
			}
			if err := write(ctx, tx, e); err != nil {
				return err
			}
			return g.wait(ctx)
		}}))
	stale := publishOne(t, b)
	g.next(t)
	expireAndReap(ctx, t, b, stale.JobID)
	again := b.ClaimOnce(t, time.Minute)
	if len(again) != 1 {
		t.Fatalf("re-claimed %+v", again)
	}
	if err := b.Publish(again[0]); err != nil {
		t.Fatal(err)
	}
	g.next(t)
	b.WaitJobStatus(t, stale.JobID, "completed", wait)
	close(g.gates[0])
	// The stale attempt's outcome: fenced out, one way or the other.
	b.waitLogged(t, "attempt outcome not recorded: the job's lease was lost", 1) // logged once its outcome is (not) recorded
	// Fenced by the serialization failure of its completion, which is run
	// again at once (a 40001) and then finds the lease gone before its
	// transaction begins.
	if lines := grepLines(b.logs.String(), "lease was lost"); len(lines) != 2 ||
		!strings.Contains(lines[0], "handler not run: the job's lease was lost before its transaction began") {
		t.Fatalf("the stale attempt's outcome: %v", lines)
	}
	j := b.Job(t, stale.JobID)
	if j.Status != "completed" || j.LastError != nil {
		t.Fatalf("the stale attempt's outcome overwrote the new one: job %+v (last_error %s)", j, deref(j.LastError))
	}
	if got := effectRows(t, b, stale.JobID); len(got) != 1 {
		t.Fatalf("effects committed %d times (attempts %v), want once", len(got), got)
	}
	for _, o := range b.Outcomes(t, stale.JobID) {
		if o == "failed" || o == "dead_letter" {
			t.Fatalf("a failure was recorded for the stale attempt: outcomes %v", b.Outcomes(t, stale.JobID))
		}
	}
}

// A doubly delivered attempt runs on two replicas: one with a plain Func
// (its success goes through the batched, non-transactional CompleteJobs),
// one with a TxFunc. The transactional one has completed the job in its
// transaction and is committing; a deferred constraint trigger holds its
// COMMIT (on an advisory lock the test holds), so the window between its
// completion and its commit stays open. In that window: the lease (expired
// on the committed row) is not reaped or claimed, a replay does not take
// the job, and the other replica's batched completion waits for the row.
// Then the commit either lands (the batched completion is fenced out) or
// fails (the batched completion wins, the transaction's writes are gone and
// its failure record is fenced out). Either way: one success, effects once.
func TestTxCommitWindowRacesBatchedCompletion(t *testing.T) {
	t.Parallel()
	for _, commitFails := range []bool{false, true} {
		name := "commit lands"
		if commitFails {
			name = "commit fails"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			commitWindow(t, commitFails)
		})
	}
}

// commitWindow is one case of TestTxCommitWindowRacesBatchedCompletion: the
// transactional commit lands, or fails.
func commitWindow(t *testing.T, commitFails bool) {
	ctx := context.Background()
	b := setup(t)
	effects(t, b)
	if _, err := b.Admin.Exec(ctx, `
CREATE TABLE public.commit_gate (fail boolean NOT NULL);
INSERT INTO public.commit_gate VALUES (false);
GRANT SELECT ON public.commit_gate TO webhook_worker;
CREATE FUNCTION public.hold_commit() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(4242);
    IF (SELECT fail FROM public.commit_gate) THEN
        RAISE EXCEPTION 'commit refused by the test';
    END IF;
    RETURN NULL;
END $$;
CREATE CONSTRAINT TRIGGER hold_commit AFTER INSERT ON public.effects
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION public.hold_commit();`); err != nil {
		t.Fatal(err)
	}
	// The advisory lock that holds the transactional replica's COMMIT.
	holder, err := b.Admin.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Release()
	if _, err := holder.Exec(ctx, `SELECT pg_advisory_lock(4242)`); err != nil {
		t.Fatal(err)
	}
	unlocked := false
	unlock := func() {
		if !unlocked {
			unlocked = true
			if _, err := holder.Exec(ctx, `SELECT pg_advisory_unlock(4242)`); err != nil {
				t.Error(err)
			}
		}
	}
	defer unlock()

	// Replica X: plain handler, batched completion; its effect is counted here.
	xGate := make(chan struct{})
	xStarted := make(chan struct{}, 2)
	var xCalls int
	var xMu sync.Mutex
	xBus := bus.NewGoChannel(slog.New(slog.DiscardHandler))
	t.Cleanup(func() { xBus.Close() })
	xLogs := &consumertest.LockedBuffer{}
	xCfg := b.config(consumers.Handler{Name: "ledger", Concurrency: 4, MaxAttempts: 5, Backoff: noBackoff,
		Func: func(ctx context.Context, e *consumers.Event) error {
			xMu.Lock()
			xCalls++
			xMu.Unlock()
			xStarted <- struct{}{}
			<-xGate
			return nil
		}})
	xCfg.Subscriber, xCfg.WorkerID = xBus, "replica-x"
	xCfg.Logger = slog.New(slog.NewJSONHandler(xLogs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("replica x logs:\n%s", xLogs.String())
		}
	})

	// Replica Y: transactional handler.
	yGate := make(chan struct{})
	yStarted := make(chan struct{}, 2)
	yCfg := b.config(consumers.Handler{Name: "ledger", Concurrency: 4, MaxAttempts: 5, Backoff: noBackoff,
		TxFunc: func(ctx context.Context, tx pgx.Tx, e *consumers.Event) error {
			if err := write(ctx, tx, e); err != nil {
				return err
			}
			yStarted <- struct{}{}
			select {
			case <-yGate:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}})
	yCfg.WorkerID = "replica-y"
	b.start(t, yCfg)
	b.start(t, xCfg)

	b.InsertEvent(t, consumertest.EventParams{})
	refs := b.ClaimOnce(t, time.Minute)
	if len(refs) != 1 {
		t.Fatalf("claimed %+v", refs)
	}
	ref := refs[0]
	msg, err := bus.NewMessage(ref)
	if err != nil {
		t.Fatal(err)
	}
	// X reads the attempt and runs; then Y.
	if err := xBus.Publish(bus.Topic("ledger"), msg); err != nil {
		t.Fatal(err)
	}
	<-xStarted
	if err := b.Publish(ref); err != nil {
		t.Fatal(err)
	}
	<-yStarted
	// The lease runs out (on the row as committed) before Y completes.
	if _, err := b.Admin.Exec(ctx, `UPDATE webhook_ingress.jobs SET lease_expires_at = now() - interval '1 second' WHERE id = $1`, ref.JobID); err != nil {
		t.Fatal(err)
	}
	close(yGate)
	waitFor := func(what, cond string) {
		t.Helper()
		consumertest.WaitFor(t, wait, what, func() bool {
			var n int
			if err := b.Admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND `+cond).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n > 0
		})
	}
	waitFor("Y's COMMIT held by the deferred trigger", `wait_event_type = 'Lock' AND wait_event = 'advisory' AND query ILIKE 'commit%'`)

	// The window: Y has completed the job in its transaction, not committed.
	short, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := consumertest.AsRole(short, b.Admin, "webhook_streamer", func(tx pgx.Tx) error {
		reaped, err := queries.New(tx).ReapExpiredLeases(short, 10)
		if err == nil && len(reaped) != 0 {
			t.Errorf("the reaper took the lease of a job whose completion is committing: %+v", reaped)
		}
		return err
	}); err != nil {
		t.Fatalf("reap during the commit window: %v", err)
	}
	if again := b.ClaimOnce(t, time.Minute); len(again) != 0 {
		t.Fatalf("a claim leased the job during its completion's commit: %+v", again)
	}
	if err := consumertest.AsRole(short, b.Admin, "webhook_operator", func(tx pgx.Tx) error {
		ids, err := queries.New(tx).AdminRequeueJobs(short, queries.AdminRequeueJobsParams{JobIds: []int64{ref.JobID}})
		if err == nil && len(ids) != 0 {
			t.Errorf("a replay re-queued the job during its completion's commit: %v", ids)
		}
		return err
	}); err != nil {
		t.Fatalf("replay during the commit window: %v", err)
	}

	// X's handler returns: its batched completion waits for Y's row lock.
	close(xGate)
	waitFor("X's batched completion waiting for the job's row", `wait_event_type = 'Lock' AND query ILIKE '%complete_jobs%'`)
	if commitFails {
		if _, err := b.Admin.Exec(ctx, `UPDATE public.commit_gate SET fail = true`); err != nil {
			t.Fatal(err)
		}
	}
	unlock()

	// Both attempts end: each logs its outcome (recorded, or fenced out).
	for _, l := range []*consumertest.LockedBuffer{xLogs, b.logs} {
		consumertest.WaitFor(t, wait, "both replicas' outcomes", func() bool {
			s := l.String()
			return strings.Contains(s, `"msg":"attempt finished"`) || strings.Contains(s, "attempt outcome not recorded: the job's lease was lost")
		})
	}
	var status, worker string
	if err := b.Admin.QueryRow(ctx, `SELECT status, coalesce(worker_id, '') FROM webhook_ingress.jobs WHERE id = $1`, ref.JobID).Scan(&status, &worker); err != nil {
		t.Fatal(err)
	}
	txEffects := len(effectRows(t, b, ref.JobID))
	outcomes := b.Outcomes(t, ref.JobID)
	xMu.Lock()
	plain := xCalls
	xMu.Unlock()
	t.Logf("job %s by %q; outcomes %v; transactional effects %d", status, worker, outcomes, txEffects)
	switch {
	case plain != 1:
		t.Fatalf("replica x ran %d times", plain)
	case !commitFails && (status != "completed" || worker != "replica-y" || txEffects != 1 || !slices.Equal(outcomes, []string{"completed"})):
		t.Fatalf("commit landed: want completed by replica-y, its effects once, X fenced out")
	case commitFails && txEffects != 0:
		t.Fatalf("commit failed, yet its effects were committed")
	// After the failed commit, Y's failure record and X's batched success
	// race for the row (X waited first, but PostgreSQL's tuple lock is not
	// a queue against a statement that finds the row unlocked): either wins,
	// once, and the other is fenced out.
	case commitFails && !(status == "completed" && worker == "replica-x" && slices.Equal(outcomes, []string{"completed"}) ||
		status == "failed" && slices.Equal(outcomes, []string{"failed"})):
		t.Fatalf("commit failed: want completed by replica-x or failed by replica-y, exactly one outcome")
	}
}

// grepLines is the lines of s that contain sub.
func grepLines(s, sub string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return out
}

// The window between a transactional completion and its commit, at the
// statement level: every other outcome of the same lease token (a failure
// record, a forced stop's give-back, a lease extension) waits for the row
// and, once the completion commits, finds it no longer leased; when the
// transaction rolls back instead, exactly one of the waiting outcomes takes
// the job, and none of the transaction's writes remain.
func TestTxCompletionWindowFencesEveryOtherOutcome(t *testing.T) {
	t.Parallel()
	for _, commit := range []bool{true, false} {
		name := "commit"
		if !commit {
			name = "rollback"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b := setup(t)
			effects(t, b)
			if _, err := b.Admin.Exec(ctx, `INSERT INTO webhook_ingress.subscriptions (handler) VALUES ('ledger')`); err != nil {
				t.Fatal(err)
			}
			eventID := b.InsertEvent(t, consumertest.EventParams{})
			refs := b.ClaimOnce(t, time.Minute)
			if len(refs) != 1 {
				t.Fatalf("claimed %+v", refs)
			}
			ref := refs[0]
			tx, err := b.Worker.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(ctx)
			if _, err := tx.Exec(ctx, `INSERT INTO public.effects (event_id, job_id, attempt) VALUES ($1, $2, $3)`, eventID, ref.JobID, ref.Attempt); err != nil {
				t.Fatal(err)
			}
			done, err := queries.New(tx).CompleteJobs(ctx, queries.CompleteJobsParams{Column1: []int64{ref.JobID}, Column2: []int32{int32(ref.Attempt)},
				Column3: []time.Time{ref.EventReceivedAt}, Column4: []time.Time{ref.LeasedAt}, Column5: "tx-worker"})
			if err != nil || len(done) != 1 {
				t.Fatalf("complete in the transaction: %v %v", done, err)
			}
			q := queries.New(b.Worker)
			won := make(chan string, 3)
			errs := make(chan error, 3)
			var wg sync.WaitGroup
			wg.Go(func() {
				msg, class, worker := "stale failure", "handler_error", "other-worker"
				_, err := q.FailJob(ctx, queries.FailJobParams{ID: ref.JobID, AttemptCount: int32(ref.Attempt), LastError: &msg, LastErrorClass: &class,
					AttemptedAt: &ref.LeasedAt, WorkerID: &worker})
				switch {
				case err == nil:
					won <- "fail"
				case !errors.Is(err, pgx.ErrNoRows):
					errs <- err
				}
			})
			wg.Go(func() {
				given, err := q.GiveBackAttempt(ctx, queries.GiveBackAttemptParams{JobID: ref.JobID, EventReceivedAt: ref.EventReceivedAt,
					Attempt: int32(ref.Attempt), LeasedAt: ref.LeasedAt})
				switch {
				case err != nil:
					errs <- err
				case given:
					won <- "give back"
				}
			})
			wg.Go(func() {
				worker := "other-worker"
				_, err := q.ExtendLease(ctx, queries.ExtendLeaseParams{ID: ref.JobID, AttemptCount: int32(ref.Attempt), Column3: time.Minute,
					AttemptedAt: &ref.LeasedAt, WorkerID: &worker})
				if err != nil && !errors.Is(err, pgx.ErrNoRows) {
					errs <- err
				}
			})
			consumertest.WaitFor(t, wait, "three statements waiting for the job's row", func() bool {
				var n int
				if err := b.Admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()`).Scan(&n); err != nil {
					t.Fatal(err)
				}
				return n >= 3
			})
			if commit {
				err = tx.Commit(ctx)
			} else {
				err = tx.Rollback(ctx)
			}
			if err != nil {
				t.Fatal(err)
			}
			wg.Wait()
			close(won)
			close(errs)
			for err := range errs {
				t.Fatalf("a waiting outcome: %v", err)
			}
			var winners []string
			for w := range won {
				winners = append(winners, w)
			}
			j := b.Job(t, ref.JobID)
			rows := effectRows(t, b, ref.JobID)
			switch {
			case commit && (len(winners) != 0 || j.Status != "completed" || len(rows) != 1):
				t.Fatalf("after the commit: outcomes %v also took the job; job %+v; effects %v", winners, j, rows)
			case !commit && (len(winners) != 1 || j.Status == "completed" || j.Status == "leased" || len(rows) != 0):
				t.Fatalf("after the rollback: outcomes %v took the job; job %+v; effects %v", winners, j, rows)
			}
		})
	}
}

// publishOne stores an event, claims its one job and publishes the
// reference, as the streamer would; it returns the reference.
func publishOne(t *testing.T, b *testBundle) bus.Ref {
	t.Helper()
	b.InsertEvent(t, consumertest.EventParams{})
	refs := b.ClaimOnce(t, time.Minute)
	if len(refs) != 1 {
		t.Fatalf("claimed %+v", refs)
	}
	if err := b.Publish(refs[0]); err != nil {
		t.Fatal(err)
	}
	return refs[0]
}

// expireAndReap ends job id's lease and runs the reaper, as a lease that
// ran out would.
func expireAndReap(ctx context.Context, t *testing.T, b *testBundle, id int64) {
	t.Helper()
	if _, err := b.Admin.Exec(ctx, `UPDATE webhook_ingress.jobs SET lease_expires_at = now() - interval '1 second' WHERE id = $1`, id); err != nil {
		t.Fatal(err)
	}
	if err := consumertest.AsRole(ctx, b.Admin, "webhook_streamer", func(tx pgx.Tx) error {
		_, err := queries.New(tx).ReapExpiredLeases(ctx, 10)
		return err
	}); err != nil {
		t.Fatal(err)
	}
}
