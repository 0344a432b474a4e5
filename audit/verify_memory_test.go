package audit

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
)

// Verify's memory does not grow with the log's history: it keeps tlog's
// stored hashes of the tree's frontier only (log n of them) between
// checkpoints. (Found by a review: it kept every stored hash of the whole
// tree, about two 32-byte hashes per id ever sealed, pruned ids included: a
// billion ids would have needed ~64 GB.)

// The live heap is the whole test process's: measureAlone keeps the tests
// that measure it (and build large logs to measure over) from running at
// once, or one's hundreds of thousands of ids sealed count in the other's
// samples. Other tests still run beside them.
var measureAlone sync.Mutex

// heapProbe is the audit role's real pool; the transactions it begins
// measure the live heap (after a GC) each time Verify sends a query, that is
// at every page of retention_log runs, checkpoints and events it reads.
type heapProbe struct {
	DB
	mu      sync.Mutex
	samples []uint64
}

func (h *heapProbe) Begin(ctx context.Context) (pgx.Tx, error) {
	tx, err := h.DB.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return &probedTx{Tx: tx, h: h}, nil
}

type probedTx struct {
	pgx.Tx
	h *heapProbe
}

func (t *probedTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	t.h.mu.Lock()
	t.h.samples = append(t.h.samples, m.HeapAlloc)
	t.h.mu.Unlock()
	return t.Tx.Query(ctx, sql, args...)
}

func TestVerifyMemoryStaysBounded(t *testing.T) {
	t.Parallel()
	measureAlone.Lock()
	defer measureAlone.Unlock()
	const n = 300000
	b := setup(t, Config{MaxLeaves: 10000})
	b.owns(t, `INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, event_type, headers, raw_body, signature_verified, secret_index, request_uri)
		SELECT 'stripe', 'stripe', 'evt_bulk_'||g, 'invoice.paid', '{}', convert_to('{"id":"evt_bulk_'||g||'"}', 'UTF8'), true, 0, '/webhooks/stripe'
		FROM generate_series(1, 300000) g`)
	if cps := b.seal(t); len(cps) != n/10000 {
		t.Fatalf("sealed %d checkpoints, want %d", len(cps), n/10000)
	}
	probe := &heapProbe{DB: b.audit}
	rep, err := Verify(context.Background(), probe, VerifyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK || rep.Events != n {
		t.Fatalf("verify: %+v", rep)
	}
	s := probe.samples
	if len(s) < 4 {
		t.Fatalf("%d heap samples", len(s))
	}
	// The first queries read retention_log and the first page of
	// checkpoints; from then on one page of each is held at a time.
	base, peak := s[2], s[2]
	for _, x := range s[2:] {
		base, peak = min(base, x), max(peak, x)
	}
	growth := int64(peak) - int64(base)
	t.Logf("live heap at each query of verify (MB): first %.1f, least %.1f, most %.1f, last %.1f, over %d queries, for %d events",
		mb(s[2]), mb(base), mb(peak), mb(s[len(s)-1]), len(s), n)
	if limit := int64(8 << 20); growth > limit {
		t.Errorf("verify's live heap grew by %.1f MB over a log of %d events (~%d bytes per event): memory proportional to the whole log, unbounded on a large one",
			mb(uint64(growth)), n, growth/n)
	}
}

func mb(x uint64) float64 { return float64(x) / (1 << 20) }

// TestVerifyMemoryDoesNotGrowWithPrunedHistory (review helper-305, fixed).
// Defect: Verify holds every run of ids that retention_log has ever recorded
// in memory for the whole pass: audit/verify.go readPruned collects
// AuditPrunedIDs (one row per run, of every retention_log row since the log
// began) into a slice of pruneClaim (~80 bytes each; pgx's row slice doubles
// it while it is copied) before the first checkpoint is read. A run ends at
// every id with no event in the dropped period, and every duplicate delivery
// draws an id the events_dedupe trigger then skips (as does every rolled-back
// insert), so a log with duplicates has about one run per duplicate: memory
// grows with the whole pruned history, forever (inlet retention only adds
// rows), although the package (verifier.stored) and
// TestVerifyMemoryStaysBounded promise that verify's memory does not grow
// with the log's history. E.g. 10^9 events with 2% duplicates dropped over
// the years: 2*10^7 runs, ~1.6-3 GB for every `inlet audit verify` (cron).
// Setup: a weekly partition 60 days old holding 350,000 events, each
// delivered twice (350,000 ids drawn by duplicates and skipped); sealed;
// dropped by drop_partition (inlet retention's step): one retention_log row
// of 350,000 runs. Verify through a pool that samples the live heap (after a
// GC) at each query.
// Expected: the live heap Verify keeps after reading retention_log stays
// within the 8 MB TestVerifyMemoryStaysBounded allows a whole pass.
// Observed: live heap 2.2 MB before retention_log is read, 28.9 MB at
// the next query and never below it until Verify returns: 26.7 MB kept for
// 350,000 runs (80 bytes per run; 36.5 MB peak while pgx's rows are copied).
// Fixed: Verify reads AuditPrunedIDs through a cursor in its transaction
// (its snapshot), declared and first fetched where the whole list was read
// before, and fetches the next page of runs only when the sweep by id
// (prunes.at) reaches past the one it holds, keeping that page and the
// runs still active, so every check on a claim is made as before.
func TestVerifyMemoryDoesNotGrowWithPrunedHistory(t *testing.T) {
	t.Parallel()
	measureAlone.Lock()
	defer measureAlone.Unlock()
	const n = 350000
	ctx := context.Background()
	b := setup(t, Config{MaxLeaves: 10000})
	// Partitions from ten weeks ago, as retention's own tests lay them out.
	b.owns(t, `SELECT webhook_ingress.drop_partition(period_start) FROM webhook_ingress.partitions()`,
		`SELECT webhook_ingress.create_partitions('week', 2, now() - interval '70 days')`)
	// Each event delivered twice: the second delivery draws an id and is
	// skipped by events_dedupe (what every duplicate webhook does).
	b.owns(t, fmt.Sprintf(`INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, event_type, headers, raw_body, signature_verified, received_at)
		SELECT 'stripe', 'stripe', 'evt_r305_'||(g/2), 'invoice.paid', '{}', convert_to('{"id":"evt_r305_'||(g/2)||'"}', 'UTF8'), true, now() - interval '60 days'
		FROM generate_series(0, %d) g ORDER BY g`, 2*n-1))
	var stored, maxID int64
	if err := b.owner.QueryRow(ctx, `SELECT count(*), max(id) FROM webhook_ingress.events`).Scan(&stored, &maxID); err != nil {
		t.Fatal(err)
	}
	if stored != n || maxID < 2*n-1 {
		t.Fatalf("%d events stored, max id %d: want %d events over %d ids", stored, maxID, n, 2*n)
	}
	b.seal(t)
	var sealedThrough int64
	if err := b.owner.QueryRow(ctx, `SELECT coalesce(max(last_event_id), 0) FROM webhook_ingress.audit_checkpoints`).Scan(&sealedThrough); err != nil {
		t.Fatal(err)
	}
	if sealedThrough < maxID {
		t.Fatalf("sealed through %d, want %d", sealedThrough, maxID)
	}
	b.owns(t, `SELECT webhook_ingress.drop_partition(period_start) FROM webhook_ingress.partitions()
		WHERE period_start <= now() - interval '60 days' AND period_end > now() - interval '60 days'`)
	var runs int64
	if err := b.owner.QueryRow(ctx, `SELECT coalesce(sum(cardinality(event_ids)), 0) FROM webhook_ingress.retention_log`).Scan(&runs); err != nil {
		t.Fatal(err)
	}
	if runs != n {
		t.Fatalf("retention_log records %d runs of ids, want %d", runs, n)
	}

	probe := &heapProbe{DB: b.audit}
	rep, err := Verify(ctx, probe, VerifyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK || rep.Pruned != n {
		t.Fatalf("verify after the drop: %+v", rep)
	}
	s := probe.samples
	t.Logf("heap samples (MB): %.1f", func() []float64 {
		out := make([]float64, len(s))
		for i, x := range s {
			out[i] = mb(x)
		}
		return out
	}())
	if len(s) < 3 {
		t.Fatalf("%d heap samples", len(s))
	}
	// s[0]: before retention_log is read; s[1:]: every later query, claims held.
	least := s[1]
	for _, x := range s[1:] {
		least = min(least, x)
	}
	kept := int64(least) - int64(s[0])
	t.Logf("live heap before reading retention_log %.1f MB; least at any later query %.1f MB: %.1f MB kept for %d pruned runs (%d bytes per run), over %d queries",
		mb(s[0]), mb(least), float64(kept)/(1<<20), runs, kept/runs, len(s))
	if limit := int64(8 << 20); kept > limit {
		t.Errorf("verify keeps %.1f MB for the %d runs of ids retention_log names, for the whole pass: memory proportional to the pruned history, unbounded on a long-lived log",
			float64(kept)/(1<<20), runs)
	}
}
