package consumers_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inlet-dev/inlet/consumers"
	"github.com/inlet-dev/inlet/consumers/bus"
	"github.com/inlet-dev/inlet/consumers/internal/consumertest"
	"github.com/inlet-dev/inlet/schema/queries"
)

// TestFrozenBreakerResetDoesNotStopTheHandler (review helper-234, fixed).
// Defect: helper-221's fix bounds the idle time of the SDK transactions that
// hold the JOB's row lock (the TxFunc completion, record's failure
// transaction), but not the other SDK transaction that locks a row every
// streamer needs: the circuit breaker's reset after each success
// (consumers/circuit.go: Service.reset — BEGIN; LockHandlerLimits (SELECT …
// FOR UPDATE on the handler's handler_limits row); HandlerSucceeded; COMMIT,
// each its own round trip, opened after every committed success of a
// handler with BreakerFailures, i.e. open most of the time under load). A
// consumer frozen there (SIGSTOP, a paused container or VM, a partition that
// closes nothing: the very cases doc.go, docs/pipeline.md and the CHANGELOG
// now say are bounded) leaves its session "idle in transaction" holding the
// handler_limits row. Every streamer's limited claim of that handler takes
// the row with lock_timeout 200ms, reads 55P03 as "another streamer holds
// h's row: it claims h meanwhile" (streamer/streamer.go: claimLimited) and
// leases nothing, so NO replica delivers ANY job of the handler until TCP
// gives up (hours; never for a stopped process); every other consumer's
// failure record of the handler (HandlerFailed) waits on the row while
// holding its job's row lock. Breaks "kill any process at any moment …
// every job ends completed or dead-lettered" and the new doc promise that a
// frozen consumer holds nothing past 15 s.
// Setup: a handler with BreakerFailures (limited: claimed apart); the
// consumer's pool goes through the freeze proxy of frozen_commit_test.go,
// which freezes (drops everything, closes nothing) at the COMMIT following
// the LockHandlerLimits statement, i.e. the first breaker reset after the
// first job completes. A streamer stand-in claims the handler as
// streamer.claimLimited does (lock_timeout 200ms, LockHandlerLimits,
// ClaimLimitedJobs) every 50 ms, on its own connection. After the freeze a
// second event is stored.
// Expected: the second job is leased within 40 s of the freeze (15 s bound +
// margin), as a job locked by a consumer frozen before its completion's
// COMMIT now is.
// Observed: after 40 s job 2 is still 'pending'; all 154 limited claims since
// the freeze failed with 55P03 (lock_timeout on the handler_limits row), and
// pg_stat_activity shows the frozen session "idle in transaction for
// 00:00:40". (With idle_in_transaction_session_timeout = 15s set on the
// database, as a check of the fix's effect, the test passes in 15.4 s.)
// Fixed: reset's transaction begins with recordTxOptions (its idle time
// bounded, as record's), and so does Register's (subscriptions and
// handler_limits rows).
func TestFrozenBreakerResetDoesNotStopTheHandler(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	proxy := newFreezeProxy(t, b.Worker.Config(), []byte("-- name: LockHandlerLimits"))
	pcfg := b.Worker.Config().Copy()
	pcfg.ConnConfig.Host, pcfg.ConnConfig.Port = "127.0.0.1", proxy.port
	pcfg.ConnConfig.Fallbacks = nil
	pcfg.ConnConfig.ConnectTimeout = 2 * time.Second
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		t.Fatal(err)
	}
	const handler = "ledger"
	cfg := b.config(consumers.Handler{Name: handler, MaxAttempts: 5, Backoff: noBackoff, BreakerFailures: 3, Func: ok})
	cfg.Pool = pool
	svc, err := consumers.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = svc.Stop(sctx) // the consumer was frozen: its outcome is not the point
		pool.Close()
	})
	claims := startLimitedClaimer234(t, b, handler)
	t.Cleanup(proxy.close) // runs first: the freeze ends with the test

	first := b.JobID(t, b.InsertEvent(t, consumertest.EventParams{}), handler)
	select {
	case <-proxy.frozenCh:
	case <-time.After(2 * wait):
		t.Fatalf("the consumer never sent the COMMIT of a breaker reset (job %d: %+v)", first, b.Job(t, first))
	}
	frozeAt := time.Now()
	// Another replica of the handler is alive (its liveness row, as
	// ConsumerAlive writes it): the frozen one's liveness runs out, and a
	// limited claim leases only jobs a live consumer could receive (076).
	if _, err := b.Admin.Exec(ctx, `INSERT INTO webhook_ingress.consumers (handler, worker_id, seen_at, alive_until, db_role)
		VALUES ($1, 'replica-2', now(), now() + interval '1 hour', '')`, handler); err != nil {
		t.Fatal(err)
	}
	refusedBefore := claims.refused.Load()
	second := b.JobID(t, b.InsertEvent(t, consumertest.EventParams{}), handler)
	const bound = 40 * time.Second
	for {
		j := b.Job(t, second)
		if j.Status != "pending" {
			return // claimed: the frozen session no longer holds the handler's row
		}
		if time.Since(frozeAt) > bound {
			var held string
			_ = b.Admin.QueryRow(ctx, `SELECT coalesce(string_agg(state || ' for ' || date_trunc('second', now() - state_change)::text, ', '), 'none')
				FROM pg_stat_activity WHERE datname = current_database() AND state LIKE 'idle in transaction%'`).Scan(&held)
			t.Fatalf("%s after the consumer froze in its breaker reset (after job %d completed), job %d of %q is still %s: "+
				"%d limited claims of the handler since the freeze were refused (55P03, the handler_limits row is locked), %d jobs leased in all (the first, before the freeze); "+
				"sessions idle in transaction: %s. No replica can deliver the handler's jobs while that process stays frozen",
				time.Since(frozeAt).Round(time.Second), first, second, handler, j.Status,
				claims.refused.Load()-refusedBefore, claims.leased.Load(), held)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// limitedClaimer234 counts what the streamer stand-in's claims did.
type limitedClaimer234 struct {
	refused atomic.Int64 // 55P03: the handler's row was locked
	leased  atomic.Int64 // jobs leased
}

// startLimitedClaimer234 claims handler every 50 ms as streamer.claimLimited
// does (lock_timeout 200ms, LockHandlerLimits, ClaimLimitedJobs, as the
// streamer role), on the bundle's admin pool, and publishes what it leases.
func startLimitedClaimer234(t *testing.T, b *testBundle, handler string) *limitedClaimer234 {
	t.Helper()
	c := &limitedClaimer234{}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		ctx := context.Background()
		for {
			var refs []bus.Ref
			err := consumertest.AsRole(ctx, b.Admin, "webhook_streamer", func(tx pgx.Tx) error {
				if _, err := tx.Exec(ctx, `SELECT pg_catalog.set_config('lock_timeout', '200ms', true)`); err != nil {
					return err
				}
				q := queries.New(tx)
				if err := q.LockHandlerLimits(ctx, handler); err != nil {
					return err
				}
				rows, err := q.ClaimLimitedJobs(ctx, queries.ClaimLimitedJobsParams{Handler: handler, BatchSize: 100, LeaseHolder: "test-streamer", LeaseFor: 10 * time.Second})
				for _, j := range rows {
					refs = append(refs, bus.Ref{JobID: j.ID, EventID: j.EventID, Handler: j.Handler, Provider: j.Provider, EventType: j.EventType,
						Attempt: int(j.AttemptCount), LeaseExpiresAt: j.LeaseExpiresAt, EventReceivedAt: j.EventReceivedAt, LeasedAt: j.AttemptedAt})
				}
				return err
			})
			var pgErr *pgconn.PgError
			switch {
			case errors.As(err, &pgErr) && pgErr.Code == "55P03":
				c.refused.Add(1)
			case err != nil:
				t.Errorf("limited claim: %v", err)
				return
			case len(refs) > 0:
				c.leased.Add(int64(len(refs)))
				if err := b.PublishBatch(refs); err != nil {
					t.Errorf("publish: %v", err)
					return
				}
			}
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(func() { close(stop); wg.Wait() })
	return c
}
