package schema_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/internal/testwait"
	"github.com/inlet-dev/inlet/schema"
)

// Several `inlet migrate` at once (an init container per replica, during the
// upgrade that left a partition index pending) build it once between them,
// and each finishes without error.
func TestBuildIndexesConcurrently(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, conn := migratedTo(t, 11)
	// Over the 10,000 rows 012 indexes inline: its payload index is left pending.
	if _, err := conn.Exec(ctx, `INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, event_type, raw_body, signature_verified)
		SELECT 'stripe', 'stripe', 'evt_' || n, 'charge.succeeded', convert_to(format('{"id":"evt_%s"}', n), 'UTF8'), true
		FROM generate_series(1, 12000) n`); err != nil {
		t.Fatal(err)
	}
	if _, err := schema.MigrateTo(ctx, conn, 12); err != nil {
		t.Fatal(err)
	}
	if p, err := schema.PendingIndexes(ctx, conn); err != nil || len(p) != 1 {
		t.Fatalf("pending indexes %+v (%v), want one", p, err)
	}
	const migrators = 3
	type result struct {
		built []schema.IndexBuild
		err   error
	}
	results := make(chan result, migrators)
	var waited atomic.Int32
	gate := make(chan struct{})
	for range migrators {
		c, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(ctx)
		go func() {
			<-gate
			built, err := schema.BuildIndexes(ctx, c, nil, func() { waited.Add(1) })
			results <- result{built, err}
		}()
	}
	// The test holds the build lock while the migrators start, so each of
	// them finds it taken and says it waits (when the first was free to
	// build at once, a fast machine built before the others looked, and
	// none waited), then lets them go.
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, schema.IndexBuildLockKey); err != nil {
		t.Fatal(err)
	}
	close(gate)
	testwait.Eventually(t, 30*time.Second, "every migrator waiting for the build lock", func() (bool, string) {
		return waited.Load() == migrators, fmt.Sprintf("%d of %d waiting", waited.Load(), migrators)
	})
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_unlock($1)`, schema.IndexBuildLockKey); err != nil {
		t.Fatal(err)
	}
	built := 0
	for range migrators {
		r := <-results
		if r.err != nil {
			t.Error(r.err)
		}
		built += len(r.built)
	}
	if built != 1 {
		t.Errorf("%d builds reported in all, want the one pending index built once", built)
	}
	// All listed it pending before the first had built it, waited, and
	// said so.
	if n := waited.Load(); n != migrators {
		t.Errorf("%d migrators said they waited, want %d", n, migrators)
	}
	var valid bool
	if err := conn.QueryRow(ctx, `SELECT indisvalid FROM pg_index WHERE indexrelid = 'webhook_ingress.idx_events_payload'::regclass`).Scan(&valid); err != nil || !valid {
		t.Fatalf("payload index valid %v (%v)", valid, err)
	}
	if p, err := schema.PendingIndexes(ctx, conn); err != nil || len(p) != 0 {
		t.Fatalf("still pending: %+v %v", p, err)
	}
}

// 024_claim_by_handler on a live queue: its index is built inline only on
// partitions of at most 10,000 jobs; a larger one is left pending for
// BuildIndexes (CONCURRENTLY), and claims work before and after it is built.
func TestDueByHandlerIndexOnALargeQueue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, conn := migratedTo(t, 23)
	execAll(t, conn,
		`INSERT INTO webhook_ingress.subscriptions (handler) VALUES ('queued')`,
		`INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, raw_body, signature_verified)
		 SELECT 'stripe', 'stripe', 'evt_' || n, '{}', true FROM generate_series(1, 12000) n`,
	)
	if _, err := schema.MigrateTo(ctx, conn, 24); err != nil {
		t.Fatal(err)
	}
	p, err := schema.PendingIndexes(ctx, conn)
	if err != nil || len(p) != 1 || p[0].Index != "idx_jobs_due_by_handler" {
		t.Fatalf("pending indexes %+v (%v), want idx_jobs_due_by_handler on the partition of 12,000 jobs", p, err)
	}
	claim := func(n int64) int {
		t.Helper()
		var leased int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM webhook_ingress.claim_jobs('{held-back}', $1, 'upgrade-streamer', interval '1 minute', NULL)`,
			n).Scan(&leased); err != nil {
			t.Fatal(err)
		}
		return leased
	}
	if n := claim(100); n != 100 {
		t.Fatalf("claim holding a handler back before the index is built: %d leased, want 100", n)
	}
	built, err := schema.BuildIndexes(ctx, conn, nil, nil)
	if err != nil || len(built) != 1 {
		t.Fatalf("built %+v (%v), want the one pending index", built, err)
	}
	var valid bool
	if err := conn.QueryRow(ctx, `SELECT indisvalid FROM pg_index WHERE indexrelid = 'webhook_ingress.idx_jobs_due_by_handler'::regclass`).Scan(&valid); err != nil || !valid {
		t.Fatalf("idx_jobs_due_by_handler valid %v (%v)", valid, err)
	}
	if n := claim(20000); n != 11900 {
		t.Fatalf("claim holding a handler back after the index is built: %d leased, want the other 11,900", n)
	}
}

// A statement_timeout meant for the services (set on the owner role or the
// database; here on the session) does not cancel a partition index build,
// which would otherwise fail on every run and never finish (noticed by
// review helper-75); the session's setting is kept.
func TestBuildIndexesIgnoresAStatementTimeout(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, conn := migratedTo(t, 11)
	if _, err := conn.Exec(ctx, `INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, event_type, raw_body, signature_verified)
		SELECT 'stripe', 'stripe', 'evt_' || n, 'charge.succeeded', convert_to(format('{"id":"evt_%s"}', n), 'UTF8'), true
		FROM generate_series(1, 12000) n`); err != nil {
		t.Fatal(err)
	}
	if _, err := schema.MigrateTo(ctx, conn, 12); err != nil {
		t.Fatal(err)
	}
	// A transaction older than the build, with a snapshot, ended after
	// 600 ms: the CONCURRENTLY build waits for it, well past the 200 ms
	// statement_timeout (deterministically: a 1 ms timeout also cancelled
	// the reading of the settings themselves on a loaded machine).
	old, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close(ctx)
	tx, err := old.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SELECT count(*) FROM webhook_ingress.subscriptions`); err != nil {
		t.Fatal(err)
	}
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		time.Sleep(600 * time.Millisecond)
		_ = tx.Rollback(context.Background())
	}()
	defer func() { <-ended }() // before old.Close (deferred earlier)
	if _, err := conn.Exec(ctx, `SET statement_timeout = '200ms'`); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	built, err := schema.BuildIndexes(ctx, conn, nil, nil)
	if err != nil || len(built) != 1 {
		t.Fatalf("built %+v (%v) under a 200 ms statement_timeout, want the pending index", built, err)
	}
	t.Logf("built in %v, behind a transaction ended at 600 ms", time.Since(start))
	var timeout string
	if err := conn.QueryRow(ctx, `SHOW statement_timeout`).Scan(&timeout); err != nil || timeout != "200ms" {
		t.Fatalf("statement_timeout after the builds = %q (%v), want the session's 200ms back", timeout, err)
	}
}
