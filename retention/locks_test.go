package retention_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inlet-dev/inlet/internal/database"
	"github.com/inlet-dev/inlet/retention"
	"github.com/inlet-dev/inlet/schema"
	"github.com/inlet-dev/inlet/schema/queries"
)

// Ingress's insert holds events and jobs (RowExclusiveLock) when the
// fan-out's foreign-key check of events runs, and that check runs a generic
// plan (021_generic_fk_checks), which PostgreSQL locks on every partition of
// events, the old period's included. drop_partition takes the parents
// before it takes the period's partitions exclusively (044), so an insert
// that arrives while a period is dropped is waited out, not deadlocked with.
// (Found by a review: the drop locked the partitions exclusively first and
// the parents last, the other way round, and PostgreSQL aborted one side:
// the ingress batch, answered 503, or inlet retention, which failed.)

// ingressWriter is a single connection of webhook_ingress_writer, and its pid.
func ingressWriter(t *testing.T, url string) (*pgxpool.Pool, int32) {
	t.Helper()
	ctx := context.Background()
	w, err := database.Open(ctx, url, database.Options{Role: schema.IngressRole, MaxConns: 1, AppName: "test-ingress"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	var pid int32
	if err := w.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	return w, pid
}

var ingestKey atomic.Int64

// ingest stores one event as ingress does (InsertEvent, as the ingress role:
// received_at is now(), the current period; the subscription fans it out).
func ingest(ctx context.Context, w *pgxpool.Pool) error {
	_, err := queries.New(w).InsertEvent(ctx, queries.InsertEventParams{Provider: "stripe", Scheme: "stripe",
		ExternalEventID: fmt.Sprintf("evt_lock_%d", ingestKey.Add(1)), EventType: "invoice.paid",
		Headers: []byte(`{}`), RawBody: []byte(`{}`), SignatureVerified: true, Column10: ""})
	return err
}

// waitFor polls q (a count) until it is positive, for at most 20s.
func waitFor(t *testing.T, b *bundle, what, q string, args ...any) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for b.count(t, q, args...) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestRetentionDropDoesNotDeadlockWithIngest(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	old := b.event(t, "evt_old", 60*day)
	b.finish(t, old, "completed")
	// The empty expired periods go first (old's is kept: not sealed yet), so
	// the run below has old's period alone to drop.
	run(t, b.pool, retention.Options{MaxAge: 30 * day})
	b.seal(t)
	oldPart := partitionOf(t, b, old)
	w, writerPID := ingressWriter(t, b.url)
	if err := ingest(ctx, w); err != nil { // ingest works before
		t.Fatal(err)
	}

	// A reader of job_attempts (an auditor's query of today's attempts, the
	// dashboard): only makes the drop's steps happen in a fixed order here.
	reader, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Rollback(ctx)
	if _, err := reader.Exec(ctx, `SELECT count(*) FROM webhook_ingress.job_attempts WHERE event_received_at >= '2999-01-01'`); err != nil {
		t.Fatal(err)
	}

	type result struct {
		rep retention.Report
		err error
	}
	ran := make(chan result, 1)
	go func() {
		rep, err := retention.Run(ctx, b.pool, retention.Options{MaxAge: 30 * day, Interval: "week", Ahead: 2, LockTimeout: 10 * time.Second})
		ran <- result{rep, err}
	}()
	// The drop holds the old partitions and waits for job_attempts (the reader).
	waitFor(t, b, "the drop to wait for job_attempts", `SELECT count(*) FROM pg_locks
		WHERE relation = 'webhook_ingress.job_attempts'::regclass AND mode = 'AccessExclusiveLock' AND NOT granted`)

	// An event arrives meanwhile, for the current period.
	ingested := make(chan error, 1)
	go func() { ingested <- ingest(ctx, w) }()
	waitFor(t, b, "the insert to wait", `SELECT count(*) FROM pg_locks WHERE pid = $1 AND NOT granted`, writerPID)
	t.Logf("ingest insert waits on: %s", b.lockWait(t, writerPID))
	time.Sleep(100 * time.Millisecond)
	if err := reader.Commit(ctx); err != nil {
		t.Fatal(err)
	}

	ingestErr := <-ingested
	r := <-ran
	if ingestErr != nil {
		t.Errorf("an event ingested while inlet retention dropped %s (a period months old) failed: %v", oldPart, ingestErr)
	}
	if r.err != nil {
		t.Errorf("inlet retention, with an event ingested meanwhile: %v", r.err)
	}
	for _, p := range r.rep.Partitions {
		t.Logf("retention: %s %s %s", p.Name, p.Verdict, p.Reason)
	}
}

// lockWait names what pid waits for.
// oldestWithEvents names the oldest events partition holding events.
func (b *bundle) oldestWithEvents(t *testing.T) string {
	t.Helper()
	var name string
	if err := b.pool.QueryRow(context.Background(), `SELECT tableoid::regclass::text FROM webhook_ingress.events ORDER BY received_at LIMIT 1`).Scan(&name); err != nil {
		t.Fatal(err)
	}
	return name[len("webhook_ingress."):]
}

func (b *bundle) lockWait(t *testing.T, pid int32) string {
	t.Helper()
	var s string
	if err := b.pool.QueryRow(context.Background(), `SELECT coalesce(string_agg(mode || ' on ' || coalesce(relation::regclass::text, locktype), ', '), '')
		FROM pg_locks WHERE pid = $1 AND NOT granted`, pid).Scan(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

// The drop's work (re-count the period, list its ids, delete its dedupe
// keys and lanes) runs under SHARE locks on the old partitions (044), which
// ingress's lock on them (the generic plan of the foreign-key check, above)
// does not wait for: ingest waits only for the detaches and drops. (Found
// by a review: the work ran under ACCESS EXCLUSIVE, and ingest stopped for
// as long as it took, in proportion to the period: here 300,000 events; a
// busy week holds millions. retention.lock_timeout bounds the waits for
// locks, not their holding.) Measured: one insert made once the drop holds the old
// partition. (The drop then also deadlocks with that insert, above; its
// lock_timeout ends that here, and the period is kept as "busy".)
func TestRetentionDropDoesNotStopIngest(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	const lockTimeout = 50 * time.Millisecond
	// An old period of 300,000 events, finished (no jobs: the subscription
	// is off while they are stored) and sealed.
	b.exec(t, `UPDATE webhook_ingress.subscriptions SET enabled = false`)
	b.exec(t, `INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, event_type, raw_body, signature_verified, received_at)
		SELECT 'stripe', 'stripe', 'evt_bulk_' || g, 'invoice.paid', '{}', true, now() - interval '60 days' FROM generate_series(1, 300000) g`)
	b.exec(t, `UPDATE webhook_ingress.subscriptions SET enabled = true`)
	run(t, b.pool, retention.Options{MaxAge: 30 * day}) // the empty periods
	b.seal(t)
	w, _ := ingressWriter(t, b.url)
	if err := ingest(ctx, w); err != nil {
		t.Fatal(err)
	}

	oldPart := b.oldestWithEvents(t)
	type result struct {
		rep retention.Report
		err error
	}
	ran := make(chan result, 1)
	dropStarted := time.Now()
	go func() {
		rep, err := retention.Run(ctx, b.pool, retention.Options{MaxAge: 30 * day, Interval: "week", Ahead: 2, LockTimeout: lockTimeout})
		ran <- result{rep, err}
	}()
	// Once the drop holds the old partition, one event arrives.
	deadline := time.Now().Add(20 * time.Second)
	for b.count(t, `SELECT count(*) FROM pg_locks WHERE relation = to_regclass('webhook_ingress.'||$1::text) AND mode = 'AccessExclusiveLock' AND granted`, oldPart) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the drop never held the old partition")
		}
		time.Sleep(time.Millisecond)
	}
	s := time.Now()
	insertErr := ingest(ctx, w)
	worst := time.Since(s)
	r := <-ran
	dropTook := time.Since(dropStarted)
	if r.err != nil {
		t.Fatal(r.err)
	}
	for _, p := range r.rep.Partitions {
		t.Logf("retention: %s %s %s", p.Name, p.Verdict, p.Reason)
	}
	t.Logf("an insert while the drop of %s (300,000 events) ran: %s; lock_timeout %s; the run took %s", oldPart, worst, lockTimeout, dropTook)
	if insertErr != nil {
		t.Errorf("the insert during the drop failed: %v", insertErr)
	}
	// 10 × lock_timeout, or a third of the run measured here, whichever is
	// more: the waits are bounded by lock_timeout, the rest is the machine
	// (4 × was passed by 4 ms under a loaded CI run, 2026-12-06; 10 × by
	// 238 ms under a heavier one, 2026-12-07, which stretched the whole run
	// alike). Before the fix ingest stood still for the whole drop's work,
	// most of the run.
	if limit := max(10*lockTimeout, dropTook/3); worst > limit {
		t.Errorf("ingest stood still for %s while inlet retention dropped a period 60 days old (retention.lock_timeout %s, the run %s, so at most ~%s expected)",
			worst, lockTimeout, dropTook, limit)
	}
}
