package consumers_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inlet-dev/inlet/consumers"
	"github.com/inlet-dev/inlet/consumers/internal/consumertest"
)

// TestFrozenBeforeCommitDoesNotHoldTheJobPastItsLease (review helper-221, fixed).
// Defect: a consumer whose process or host freezes (SIGSTOP, a paused
// container or VM, a network partition: the server sees neither data nor a
// close) in the one round trip between the statement that updates the job
// row and the COMMIT of its transaction leaves its server session "idle in
// transaction" holding the job's row lock. The reaper skips locked rows
// (ReapExpiredLeases: FOR UPDATE … SKIP LOCKED), so the job stays 'leased'
// with an expired lease, and no replica can run it, until the server's TCP
// keepalive gives up (over two hours by default; never for a SIGSTOPped
// peer, whose kernel still answers keepalives). doc.go / docs/pipeline.md:
// "a consumer killed or cut off before the commit holds no lock on the job:
// its lease runs out …, the job runs again". Two paths:
//   - tx: a TxFunc's transaction after the completion (consumers/tx.go:
//     runTxOnce, completeJobsOn then tx.Commit);
//   - func: any Func handler's failed attempt, recorded by FailJob,
//     InsertAttempt and COMMIT in one transaction (consumers/attempt.go:
//     Service.record).
//
// Nothing bounds the session on the server: the pools (internal/database
// Open, consumers.OpenPool) set no idle_in_transaction_session_timeout and
// the SDK sets none on the transactions it runs.
// Setup: the consumer's pool goes through a TCP proxy that, once it sees
// the COMMIT of the transaction that wrote the job row (the TxFunc's, or the
// one recording the failure), forwards nothing more in either direction and
// closes nothing (a freeze). LeaseExtend 1s, streamer lease 2s, the test
// streamer (reaper) runs on its own connection, not through the proxy.
// Expected: the job is reaped (or re-leased) within 40s of the freeze, as it
// is for a consumer frozen at any other moment
// (TestTxConsumerCutOffDoesNotHoldItsJobPastTheLease).
// Observed: after 40s the job is still 'leased' with its lease expired 38s
// earlier, and pg_stat_activity shows the frozen session "idle in
// transaction" for 40s holding it (both subtests).
// Fixed: the SDK's transactions that write the job row bound their idle
// time on the server with SET LOCAL idle_in_transaction_session_timeout
// (recordTimeout, or a stricter value already in force), sent with no
// extra round trip: batched with the completion in runTxOnce (after the
// handler returned, so its own idle time is not cut short) and in the
// BEGIN message of record's transaction. PostgreSQL ends a session frozen
// before its COMMIT, releasing the row lock, and the reaper takes the job.
func TestFrozenBeforeCommitDoesNotHoldTheJobPastItsLease(t *testing.T) {
	t.Parallel()
	t.Run("tx", func(t *testing.T) {
		t.Parallel()
		const marker = "frozen-commit-handler-conn"
		frozenBeforeCommit(t, []byte(marker), consumers.Handler{Name: "ledger", MaxAttempts: 5, Backoff: noBackoff,
			TxFunc: func(ctx context.Context, tx pgx.Tx, e *consumers.Event) error {
				// Tells the proxy which connection carries the handler's
				// transaction; its next COMMIT is the one with the completion.
				_, err := tx.Exec(ctx, "SELECT '"+marker+"'")
				return err
			}})
	})
	t.Run("func", func(t *testing.T) {
		t.Parallel()
		// FailJob's text, sent (Parse) the first time a connection records a
		// failure; that connection's next COMMIT ends the record transaction.
		frozenBeforeCommit(t, []byte("THEN 'dead_letter' ELSE 'failed' END"), consumers.Handler{Name: "mailer", MaxAttempts: 5, Backoff: noBackoff,
			Func: func(context.Context, *consumers.Event) error { return errors.New("downstream said no") }})
	})
}

func frozenBeforeCommit(t *testing.T, marker []byte, h consumers.Handler) {
	ctx := context.Background()
	b := setup(t)
	proxy := newFreezeProxy(t, b.Worker.Config(), marker)
	pcfg := b.Worker.Config().Copy()
	pcfg.ConnConfig.Host, pcfg.ConnConfig.Port = "127.0.0.1", proxy.port
	pcfg.ConnConfig.Fallbacks = nil
	pcfg.ConnConfig.ConnectTimeout = 2 * time.Second
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg := b.config(h)
	cfg.Pool = pool
	cfg.LeaseExtend = time.Second
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
	b.StartStreamer(t, consumertest.StreamerOptions{Lease: 2 * time.Second})
	// Runs before the Stop above: the freeze ends (every proxied connection
	// closed, the server's sessions with them) when the test ends.
	t.Cleanup(proxy.close)

	jobID := b.JobID(t, b.InsertEvent(t, consumertest.EventParams{}), h.Name)
	select {
	case <-proxy.frozenCh:
	case <-time.After(wait):
		t.Fatalf("the consumer never sent the COMMIT of the transaction that wrote job %d (job: %+v)", jobID, b.Job(t, jobID))
	}
	frozeAt := time.Now()
	var token time.Time
	if err := b.Admin.QueryRow(ctx, `SELECT attempted_at FROM webhook_ingress.jobs WHERE id = $1`, jobID).Scan(&token); err != nil {
		t.Fatal(err)
	}
	reaped := func() bool {
		for _, a := range b.Attempts(t, jobID) {
			if a.Outcome == "lease_expired" {
				return true
			}
		}
		var status string
		var at time.Time
		if err := b.Admin.QueryRow(ctx, `SELECT status, attempted_at FROM webhook_ingress.jobs WHERE id = $1`, jobID).Scan(&status, &at); err != nil {
			t.Fatal(err)
		}
		return status != "leased" || !at.Equal(token)
	}
	const bound = 40 * time.Second
	for !reaped() {
		if time.Since(frozeAt) > bound {
			j := b.Job(t, jobID)
			var held string
			_ = b.Admin.QueryRow(ctx, `SELECT coalesce(string_agg(state || ' for ' || date_trunc('second', now() - state_change)::text, ', '), 'none')
				FROM pg_stat_activity WHERE datname = current_database() AND state LIKE 'idle in transaction%'`).Scan(&held)
			expired := "never"
			if j.LeaseExpiresAt != nil {
				expired = time.Since(*j.LeaseExpiresAt).Round(time.Second).String() + " ago"
			}
			t.Fatalf("%s after the consumer froze before its COMMIT (lease_extend 1s, streamer lease 2s), job %d is still %s, its lease expired %s, never reaped: "+
				"the frozen session still holds the job's row lock (sessions idle in transaction: %s)",
				time.Since(frozeAt).Round(time.Second), jobID, j.Status, expired, held)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
