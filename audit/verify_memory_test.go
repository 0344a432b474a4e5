package audit

import (
	"context"
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

// heapProbe is the audit role's real pool; the transactions it begins
// measure the live heap (after a GC) each time Verify sends a query, that is
// at every page of checkpoints and of events it reads.
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
