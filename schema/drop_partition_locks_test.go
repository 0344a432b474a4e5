package schema_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inlet-dev/inlet/audit"
	"github.com/inlet-dev/inlet/internal/pgtest"
	"github.com/inlet-dev/inlet/internal/testwait"
	"github.com/inlet-dev/inlet/schema/queries"
)

// The streamer's claim (claim_jobs, a generic plan that locks every jobs
// partition, jobs before events) runs while inlet retention waits for the
// parents to drop a period: neither is aborted (044: the drop holds no
// partition lock while it waits, and waits at most 100 ms a try, below
// deadlock_timeout, giving its locks back between tries), and the drop
// goes through once the tables are free. (Found by a review: the drop held
// the old partitions while it waited for the parents, and PostgreSQL
// aborted the claim or the drop, 40P01.)
func TestDropPartitionDoesNotDeadlockWithClaims(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	connect := func() *pgx.Conn {
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close(context.Background()) })
		return conn
	}
	admin, reader, dropper, streamer := connect(), connect(), connect(), connect()
	execAll(t, admin,
		`SELECT webhook_ingress.drop_partition(period_start) FROM webhook_ingress.partitions()`,
		`SELECT webhook_ingress.create_partitions('week', 2, now() - interval '70 days')`,
		`INSERT INTO webhook_ingress.subscriptions (handler) VALUES ('h')`,
		// A job due now, in the current period: live traffic.
		`INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, raw_body, signature_verified)
		 VALUES ('stripe', 'stripe', 'evt_now', '{}', true)`,
	)
	// The oldest period: empty, so finished and sealed; dropping it is what
	// inlet retention does every day.
	var oldStart time.Time
	var oldJobs string
	if err := admin.QueryRow(ctx, `SELECT period_start, webhook_ingress.partition_name('jobs', period_start)
		FROM webhook_ingress.partitions() ORDER BY period_start LIMIT 1`).Scan(&oldStart, &oldJobs); err != nil {
		t.Fatal(err)
	}
	// A reader of events (an auditor's query, the dashboard) keeps the drop
	// waiting for the parents while the streamer claims, many times.
	rtx, err := reader.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer rtx.Rollback(ctx)
	if _, err := rtx.Exec(ctx, `SELECT count(*) FROM webhook_ingress.events WHERE received_at >= '2999-01-01'`); err != nil {
		t.Fatal(err)
	}
	dropPID := func() (p uint32) {
		if err := dropper.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&p); err != nil {
			t.Fatal(err)
		}
		return p
	}()
	dropped := make(chan error, 1)
	go func() {
		dropped <- pgx.BeginFunc(ctx, dropper, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `SET LOCAL lock_timeout = '20s'`); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `SELECT * FROM webhook_ingress.drop_partition($1)`, oldStart)
			return err
		})
	}()
	testwait.Eventually(t, 30*time.Second, "the drop to wait for the parents", func() (bool, string) {
		var n int
		_ = admin.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE pid = $1 AND NOT granted`, dropPID).Scan(&n)
		return n > 0, "not waiting"
	})
	for i := range 20 {
		err := pgx.BeginFunc(ctx, streamer, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `SET LOCAL ROLE webhook_streamer`); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `SELECT count(*) FROM webhook_ingress.claim_jobs('{}', 100, 'streamer-1', '1 minute', '1 hour')`)
			return err
		})
		if err != nil {
			var pgErr *pgconn.PgError
			if errors.As(err, &pgErr) {
				t.Fatalf("claim %d while the drop waited: %v (%s)", i, err, pgErr.Detail)
			}
			t.Fatalf("claim %d while the drop waited: %v", i, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := rtx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-dropped; err != nil {
		t.Fatalf("drop_partition after the reader left: %v", err)
	}
	if _, err := admin.Exec(ctx, `SELECT 1 FROM webhook_ingress.`+pgx.Identifier{oldJobs}.Sanitize()); err == nil {
		t.Errorf("%s still there after the drop", oldJobs)
	}
}

// With ingest of an event of the period being dropped (a provider
// re-sending one, inlet backfill or reconcile storing one): the drop deletes
// the period's dedupe keys only after the drop, outside its locks (044), so
// the insert waits on a row, or on a table the drop holds, never both ways.
// (Found by a review of 044's first form: it deleted the keys under SHARE
// locks before asking for the parents, and the insert, holding events and
// waiting on a deleted key row, deadlocked with it.) A lock on the period's
// lane row holds the drop between its steps here, as a large period's work
// would.
func TestDropPartitionDoesNotDeadlockWithIngestOfAnOldKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	connect := func() *pgx.Conn {
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close(context.Background()) })
		return conn
	}
	admin, locker, dropper, ingress := connect(), connect(), connect(), connect()
	execAll(t, admin,
		`SELECT webhook_ingress.drop_partition(period_start) FROM webhook_ingress.partitions()`,
		`SELECT webhook_ingress.create_partitions('week', 2, now() - interval '70 days')`,
		`INSERT INTO webhook_ingress.subscriptions (handler, order_key) VALUES ('h', 'id')`,
		// An old event (60 days), its ordered job dead-lettered: finished, its lane kept.
		`INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, event_type, raw_body, payload, signature_verified, received_at)
		 VALUES ('stripe', 'stripe', 'evt_old', 'invoice.paid', '{"id":"a"}', '{"id":"a"}', true, now() - interval '60 days')`,
		`UPDATE webhook_ingress.jobs SET status = 'dead_letter'`,
	)
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	s, err := audit.NewSealer(audit.Config{DB: pool, Grace: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Seal(ctx); err != nil && !errors.Is(err, audit.ErrNothingToSeal) {
		t.Fatal(err)
	}
	var oldStart time.Time
	if err := admin.QueryRow(ctx, `SELECT period_start FROM webhook_ingress.partitions()
		WHERE now() - interval '60 days' >= period_start AND now() - interval '60 days' < period_end`).Scan(&oldStart); err != nil {
		t.Fatal(err)
	}
	pid := func(c *pgx.Conn) uint32 {
		var p uint32
		if err := c.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	dropPID, ingressPID := pid(dropper), pid(ingress)
	waits := func(p uint32) string {
		var s string
		_ = admin.QueryRow(ctx, `SELECT coalesce(string_agg(mode || ' on ' || coalesce(relation::regclass::text, locktype), ', '), '')
			FROM pg_locks WHERE pid = $1 AND NOT granted`, p).Scan(&s)
		return s
	}

	ltx, err := locker.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer ltx.Rollback(ctx)
	if _, err := ltx.Exec(ctx, `SELECT FROM webhook_ingress.order_lanes FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	dropped := make(chan error, 1)
	go func() {
		dropped <- pgx.BeginFunc(ctx, dropper, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `SET LOCAL lock_timeout = '5s'`); err != nil { // retention.DefaultLockTimeout
				return err
			}
			_, err := tx.Exec(ctx, `SELECT * FROM webhook_ingress.drop_partition($1)`, oldStart)
			return err
		})
	}()
	testwait.Eventually(t, 30*time.Second, "the drop to have deleted the period's keys", func() (bool, string) {
		s := waits(dropPID)
		return s == "ShareLock on transactionid", s
	})

	// The provider re-sends evt_old, through ingress's own statement and role.
	ingested := make(chan error, 1)
	go func() {
		ingested <- pgx.BeginFunc(ctx, ingress, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `SET LOCAL ROLE webhook_ingress_writer`); err != nil {
				return err
			}
			_, err := queries.New(tx).InsertEvent(ctx, queries.InsertEventParams{Provider: "stripe", Scheme: "stripe",
				ExternalEventID: "evt_old", EventType: "invoice.paid", Headers: []byte(`{}`), RawBody: []byte(`{"id":"a"}`),
				SignatureVerified: true, Column10: ""})
			return err
		})
	}()
	testwait.Eventually(t, 30*time.Second, "the insert to wait", func() (bool, string) {
		s := waits(ingressPID)
		return s != "", s
	})
	t.Logf("the insert waits for: %s", waits(ingressPID))
	_ = ltx.Rollback(ctx)

	dropErr, ingestErr := <-dropped, <-ingested
	var pgErr *pgconn.PgError
	for _, c := range []struct {
		who string
		err error
	}{{"drop_partition (inlet retention)", dropErr}, {"InsertEvent (ingress)", ingestErr}} {
		if c.err == nil {
			continue
		}
		if errors.As(c.err, &pgErr) && pgErr.Code == "40P01" {
			t.Errorf("%s, while the other ran: %v (%s)", c.who, c.err, pgErr.Detail)
		} else {
			t.Errorf("%s: %v", c.who, c.err)
		}
	}
}
