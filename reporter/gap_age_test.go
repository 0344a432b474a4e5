package reporter

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inlet-dev/inlet/internal/pgtest"
)

// TestReadGapsAgesOnlyWhatItLookedAt pins how one round of readGaps ages
// the gaps, against a real database: a gap it looked at in full and found
// empty keeps its age (so GapTTL still ends a run that never commits, and
// one past it is dropped), while what it did not look at for want of budget
// — the part of a run above the last id a full statement read, and the
// chunks after that statement — ages from this round. Before the fix (review
// helper-217) both kept their first age and expired while the reporter was
// still draining the run below them: the unread [12, 20] and the second
// chunk's gaps came back with the old since.
// TestGapRowsAboveTheBudgetDoNotExpireWhileDraining is the end-to-end case.
func TestReadGapsAgesOnlyWhatItLookedAt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, pgtest.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	// A job and three failed attempts at ids 10..12 (given, as the sequence
	// would have handed them to a transaction that committed late).
	if _, err := pool.Exec(ctx, `INSERT INTO webhook_ingress.subscriptions (handler, provider_pattern) VALUES ('forward', 'github')`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO webhook_ingress.events
		(provider, scheme, external_event_id, event_type, headers, raw_body, signature_verified)
		VALUES ('github', 'github', 'delivery-1', 'push', '{}', '\x626f6479', true)`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO webhook_ingress.job_attempts
		(id, job_id, event_received_at, attempt, worker_id, started_at, outcome, error_class, error)
		OVERRIDING SYSTEM VALUE SELECT g, j.id, j.event_received_at, g - 9, 'worker-1', now() - interval '25 milliseconds', 'failed', 'timeout', 'timed out'
		FROM webhook_ingress.jobs j, generate_series(10, 12) g`); err != nil {
		t.Fatal(err)
	}

	const ttl = time.Minute
	r := &Reporter{cfg: Config{Pool: pool, BatchSize: 4, GapTTL: ttl, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}}
	start := r.clock()
	old, expired := start.Add(-ttl/2), start.Add(-2*ttl)
	r.gaps = []gap{
		{lo: 1, hi: 5, since: old},     // looked at in full, empty: keeps its age
		{lo: 6, hi: 8, since: expired}, // past GapTTL: dropped
		{lo: 10, hi: 20, since: old},   // the budget (2) fills at 11: 12..20 is not looked at
	}
	// A second chunk of gaps (gapChunk runs to a statement), skipped once
	// the first filled the budget.
	for i := range int64(gapChunk) {
		r.gaps = append(r.gaps, gap{lo: 1000 + 2*i, hi: 1000 + 2*i, since: old})
	}

	batch, err := r.readGaps(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(batch) != 2 || batch[0].AttemptID != 10 || batch[1].AttemptID != 11 || !r.more {
		t.Fatalf("read %v (more %v), want attempts 10 and 11 and more to follow", batch, r.more)
	}
	byLo := map[int64]gap{}
	for _, g := range r.nextGaps {
		byLo[g.lo] = g
	}
	if len(byLo) != 2+gapChunk {
		t.Fatalf("%d gaps after the round, want %d: [1, 5], [12, 20] and the second chunk's", len(byLo), 2+gapChunk)
	}
	if g := byLo[1]; g.hi != 5 || !g.since.Equal(old) {
		t.Errorf("the empty gap looked at in full is [%d, %d] aged from %s, want [1, 5] still aged from %s", g.lo, g.hi, g.since, old)
	}
	if _, ok := byLo[6]; ok {
		t.Errorf("the gap past GapTTL is kept, want it dropped")
	}
	if g := byLo[12]; g.hi != 20 || g.since.Before(start) {
		t.Errorf("the unread rest of the run being drained is [%d, %d] aged from %s, want [12, 20] aged from this round (%s or later)", g.lo, g.hi, g.since, start)
	}
	for i := range int64(gapChunk) {
		if g := byLo[1000+2*i]; g.hi != 1000+2*i || g.since.Before(start) {
			t.Fatalf("a gap of the chunk skipped for want of budget is [%d, %d] aged from %s, want it aged from this round (%s or later)", g.lo, g.hi, g.since, start)
		}
	}
}
