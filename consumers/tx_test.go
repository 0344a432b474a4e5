package consumers_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/consumers"
	"github.com/inlet-dev/inlet/consumers/bus"
	"github.com/inlet-dev/inlet/consumers/internal/consumertest"
	"github.com/inlet-dev/inlet/schema/queries"
)

// effects makes the table a transactional handler writes to, one row per
// run (no unique key: a second committed run would show as a second row),
// writable by the consumer's role.
func effects(t *testing.T, b *testBundle) {
	t.Helper()
	if _, err := b.Admin.Exec(context.Background(), `
CREATE TABLE public.effects (event_id bigint NOT NULL, job_id bigint NOT NULL, attempt int NOT NULL);
GRANT SELECT, INSERT ON public.effects TO webhook_worker`); err != nil {
		t.Fatal(err)
	}
}

// effectRows returns the attempts whose effects were committed for jobID.
func effectRows(t *testing.T, b *testBundle, jobID int64) []int {
	t.Helper()
	rows, _ := b.Admin.Query(context.Background(), `SELECT attempt FROM public.effects WHERE job_id = $1 ORDER BY attempt`, jobID)
	got, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// write is a TxFunc's effect: one row for this run.
func write(ctx context.Context, tx pgx.Tx, e *consumers.Event) error {
	_, err := tx.Exec(ctx, `INSERT INTO public.effects (event_id, job_id, attempt) VALUES ($1, $2, $3)`, e.EventID, e.JobID, e.Attempt)
	return err
}

// A transactional handler's writes commit with its job's completion; an
// attempt that failed or panicked after writing leaves nothing behind, and
// the next attempt's writes are the only ones.
func TestTxHandlerWritesCommitWithTheCompletion(t *testing.T) {
	t.Parallel()
	b := setup(t)
	effects(t, b)
	h := consumers.Handler{Name: "ledger", MaxAttempts: 5, Backoff: noBackoff, TxFunc: func(ctx context.Context, tx pgx.Tx, e *consumers.Event) error {
		if err := write(ctx, tx, e); err != nil {
			return err
		}
		switch {
		case e.ExternalID == "evt_fails_once" && e.Attempt == 1:
			return errors.New("downstream said no")
		case e.ExternalID == "evt_panics_once" && e.Attempt == 1:
			panic("handler bug")
		}
		return nil
	}}
	b.start(t, b.config(h))
	b.StartStreamer(t, consumertest.StreamerOptions{})

	ok := b.JobID(t, b.InsertEvent(t, consumertest.EventParams{ExternalID: "evt_ok"}), "ledger")
	fails := b.JobID(t, b.InsertEvent(t, consumertest.EventParams{ExternalID: "evt_fails_once"}), "ledger")
	panics := b.JobID(t, b.InsertEvent(t, consumertest.EventParams{ExternalID: "evt_panics_once"}), "ledger")
	for _, id := range []int64{ok, fails, panics} {
		b.WaitJobStatus(t, id, "completed", wait)
	}
	if got := effectRows(t, b, ok); !slices.Equal(got, []int{1}) {
		t.Fatalf("effects of the job that succeeded at once: attempts %v, want [1]", got)
	}
	for _, id := range []int64{fails, panics} {
		if got := effectRows(t, b, id); !slices.Equal(got, []int{2}) {
			t.Fatalf("effects of job %d: attempts %v, want only attempt 2's (attempt 1's rolled back)", id, got)
		}
	}
	if got := b.Outcomes(t, fails); !slices.Equal(got, []string{"failed", "completed"}) {
		t.Fatalf("history of the failing job: %v", got)
	}
	if as := b.Attempts(t, panics); len(as) != 2 || deref(as[0].ErrorClass) != "panic" {
		t.Fatalf("history of the panicking job: %+v", as)
	}
}

// Two consumer processes run one doubly delivered attempt at once: both
// handlers write, one completion commits with its writes, the other is fenced
// and rolled back. One row.
func TestTxHandlerDuplicateDeliveryWritesOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	effects(t, b)
	var calls atomic.Int32
	both := make(chan struct{})
	h := consumers.Handler{Name: "ledger", TxFunc: func(ctx context.Context, tx pgx.Tx, e *consumers.Event) error {
		if err := write(ctx, tx, e); err != nil {
			return err
		}
		if calls.Add(1) == 2 {
			close(both)
		}
		select { // both have written before either completes
		case <-both:
		case <-time.After(wait):
		}
		return nil
	}}
	other := bus.NewGoChannel(slog.New(slog.DiscardHandler))
	t.Cleanup(func() { other.Close() })
	b.start(t, b.config(h))
	cfg := b.config(h)
	cfg.Subscriber, cfg.WorkerID = other, "test-worker-2"
	b.start(t, cfg)

	jobID := b.JobID(t, b.InsertEvent(t, consumertest.EventParams{}), "ledger")
	refs := b.ClaimOnce(t, time.Minute)
	if len(refs) != 1 {
		t.Fatalf("claimed %d", len(refs))
	}
	msg, err := bus.NewMessage(refs[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Publish(refs[0]); err != nil {
		t.Fatal(err)
	}
	if err := other.Publish(bus.Topic("ledger"), msg); err != nil {
		t.Fatal(err)
	}
	b.WaitJobStatus(t, jobID, "completed", wait)
	consumertest.WaitFor(t, wait, "the second run to be fenced out", func() bool {
		return strings.Contains(b.logs.String(), "handler's transaction rolled back: the job's lease was lost")
	})
	if n := calls.Load(); n != 2 {
		t.Fatalf("handler ran %d times, want 2", n)
	}
	if got := effectRows(t, b, jobID); len(got) != 1 {
		t.Fatalf("%d effect rows for one job run twice, want 1", len(got))
	}
}

// An attempt whose lease expired and was leased again while its handler ran
// (a stale lease) has its writes rolled back; the next attempt's commit.
func TestTxHandlerStaleLeaseIsRolledBack(t *testing.T) {
	t.Parallel()
	b := setup(t)
	effects(t, b)
	ctx := context.Background()
	started := make(chan int, 2)
	release := make(chan struct{})
	b.start(t, b.config(consumers.Handler{Name: "ledger", TxFunc: func(ctx context.Context, tx pgx.Tx, e *consumers.Event) error {
		if err := write(ctx, tx, e); err != nil {
			return err
		}
		started <- e.Attempt
		if e.Attempt == 1 {
			<-release
		}
		return nil
	}}))
	b.InsertEvent(t, consumertest.EventParams{})
	refs := b.ClaimOnce(t, 10*time.Second)
	if len(refs) != 1 {
		t.Fatalf("claimed %+v", refs)
	}
	if err := b.Publish(refs[0]); err != nil {
		t.Fatal(err)
	}
	if a := <-started; a != 1 {
		t.Fatalf("started attempt %d", a)
	}
	jobID := refs[0].JobID
	if _, err := b.Admin.Exec(ctx, `UPDATE webhook_ingress.jobs SET lease_expires_at = now() - interval '1 second' WHERE id = $1`, jobID); err != nil {
		t.Fatal(err)
	}
	if err := consumertest.AsRole(ctx, b.Admin, "webhook_streamer", func(tx pgx.Tx) error {
		_, err := queries.New(tx).ReapExpiredLeases(ctx, 10)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	again := b.ClaimOnce(t, 10*time.Second)
	if len(again) != 1 || again[0].Attempt != 2 {
		t.Fatalf("re-claimed %+v", again)
	}
	close(release) // attempt 1 returns nil on a lease it no longer holds
	consumertest.WaitFor(t, wait, "attempt 1's rollback", func() bool {
		return strings.Contains(b.logs.String(), "handler's transaction rolled back: the job's lease was lost")
	})
	if got := effectRows(t, b, jobID); len(got) != 0 {
		t.Fatalf("a stale attempt's writes were committed: attempts %v", got)
	}
	if err := b.Publish(again[0]); err != nil {
		t.Fatal(err)
	}
	b.WaitJobStatus(t, jobID, "completed", wait)
	if got := effectRows(t, b, jobID); !slices.Equal(got, []int{2}) {
		t.Fatalf("effects: attempts %v, want [2]", got)
	}
}

func TestTxHandlerNeedsExactlyOneFunc(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tx := func(context.Context, pgx.Tx, *consumers.Event) error { return nil }
	for _, tc := range []struct {
		h    consumers.Handler
		want string
	}{
		{consumers.Handler{Name: "h"}, "func: required (or tx_func)"},
		{consumers.Handler{Name: "h", Func: ok, TxFunc: tx}, "func and tx_func: set one, not both"},
	} {
		_, err := consumers.New(b.config(tc.h))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New: %v, want %q", err, tc.want)
		}
	}
}

// Transactional handlers hold a connection each while they run, and leave
// txReserve of the pool to the service's own statements: while every
// transaction allowed is open and waiting, another handler's attempts are
// read and run, and the transactional attempts' leases are extended. Before
// the cap, sixteen slow transactions took all eight connections and no other
// handler ran until they ended.
func TestSlowTxHandlersLeaveConnectionsToOtherHandlers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	release := make(chan struct{})
	var open, most atomic.Int64
	slow := consumers.Handler{Name: "slowtx", EventType: "slow", Concurrency: 16, Timeout: 2 * wait, MaxAttempts: 1, Backoff: noBackoff,
		TxFunc: func(ctx context.Context, tx pgx.Tx, e *consumers.Event) error {
			n := open.Add(1)
			defer open.Add(-1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			if _, err := tx.Exec(ctx, `SELECT 1`); err != nil {
				return err
			}
			select {
			case <-release:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}}
	var once atomic.Bool
	fast := consumers.Handler{Name: "fast", EventType: "fast", MaxAttempts: 1, Func: func(context.Context, *consumers.Event) error {
		if once.CompareAndSwap(false, true) {
			close(release)
		}
		return nil
	}}
	cfg := b.config(slow, fast)
	b.start(t, cfg)
	// A lease shorter than the wait: the running attempts must be extended.
	b.StartStreamer(t, consumertest.StreamerOptions{Lease: 2 * time.Second})
	var jobs []int64
	for range 16 {
		jobs = append(jobs, b.JobID(t, b.InsertEvent(t, consumertest.EventParams{EventType: "slow"}), "slowtx"))
	}
	// Then the other handler's event, once the transactions hold what they
	// may of the pool.
	maxConns := int64(b.Worker.Config().MaxConns)
	consumertest.WaitFor(t, wait, "the slow handler's transactions open", func() bool { return open.Load() >= maxConns-2 })
	jobs = append(jobs, b.JobID(t, b.InsertEvent(t, consumertest.EventParams{EventType: "fast"}), "fast"))
	consumertest.WaitFor(t, wait, "the fast handler's first call while the transactions are open", once.Load)
	for _, id := range jobs {
		b.WaitJobStatus(t, id, "completed", wait)
	}
	if m := most.Load(); m > maxConns-2 || m < 1 {
		t.Fatalf("%d handler transactions open at once, want 1..%d (the pool's %d less two)", m, maxConns-2, maxConns)
	}
	for _, id := range jobs {
		if got := b.Outcomes(t, id); !slices.Equal(got, []string{"completed"}) {
			t.Fatalf("job %d's attempts: %v, want one, completed", id, got)
		}
	}
}
