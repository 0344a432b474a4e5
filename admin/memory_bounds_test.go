package admin_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/admin"
)

// heapProbe292 is the operator's real pool: every result set a transaction
// it begins reads is measured once read whole (the live heap after a GC,
// when the rows' Next says there are no more and when they are closed), so
// the samples show what the reading function holds at its largest.
type heapProbe292 struct {
	admin.DB
	mu   sync.Mutex
	peak uint64
}

func (h *heapProbe292) BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error) {
	tx, err := h.DB.BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	return &probedTx292{Tx: tx, h: h}, nil
}

func (h *heapProbe292) sample() {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	h.mu.Lock()
	h.peak = max(h.peak, m.HeapAlloc)
	h.mu.Unlock()
}

// reset returns the live heap now and starts a new peak from it.
func (h *heapProbe292) reset() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	h.mu.Lock()
	h.peak = m.HeapAlloc
	h.mu.Unlock()
	return m.HeapAlloc
}

func (h *heapProbe292) peakNow() uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.peak
}

type probedTx292 struct {
	pgx.Tx
	h *heapProbe292
}

func (t *probedTx292) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	rows, err := t.Tx.Query(ctx, sql, args...)
	if err != nil {
		return rows, err
	}
	return &probedRows292{Rows: rows, h: t.h}, nil
}

type probedRows292 struct {
	pgx.Rows
	h *heapProbe292
}

func (r *probedRows292) Next() bool {
	if r.Rows.Next() {
		return true
	}
	r.h.sample() // the caller holds every row it kept
	return false
}

func (r *probedRows292) Close() {
	r.Rows.Close()
	r.h.sample()
}

// api292 serves the admin API (as inlet ingress does with admin.listen set)
// over probe and returns a function POSTing body to path with the token.
func api292(t *testing.T, b *testBundle, probe *heapProbe292) func(path, body string) (int, string) {
	t.Helper()
	api, err := admin.NewAPI(admin.APIConfig{Token: apiToken, DB: probe, Sources: b.sources, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api.Handler())
	t.Cleanup(srv.Close)
	return func(path, body string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, srv.URL+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+apiToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var sb strings.Builder
		buf := make([]byte, 4096)
		for {
			n, err := resp.Body.Read(buf)
			sb.Write(buf[:n])
			if err != nil {
				break
			}
		}
		return resp.StatusCode, sb.String()
	}
}

// insertLarge292 stores n events of source stripe, type charge.succeeded,
// each with a JSON body of about 1 MB (under ingress's default
// max_body_bytes and filter.MaxPayload), ids from..from+n-1.
func insertLarge292(t *testing.T, b *testBundle, from, n int) {
	t.Helper()
	b.exec(t, `INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, event_type, headers, raw_body, signature_verified, secret_index, request_uri)
		SELECT 'stripe', 'stripe', 'evt_large_'||g, 'charge.succeeded', '{}',
		       convert_to('{"data":{"object":{"amount":25000}},"n":'||g||',"pad":"'||repeat('x', 1000000)||'"}', 'UTF8'),
		       true, 0, '/webhooks/stripe'
		FROM generate_series($1::int, $2::int) g`, from, from+n-1)
}

func mib292(x int64) float64 { return float64(x) / (1 << 20) }

// TestVerifyHoldsABoundedPageOfBodies (review helper-292, fixed).
// Defect: re-verifying a time range (POST /api/events/verify, inlet events
// verify --since) holds the raw bodies of up to 500 events at once
// (admin/verify.go:Reverify reads AdminEventsToVerify, raw_body included,
// batchSize = 500 rows per statement, every row kept in a slice). Its memory
// is 500 × the body size: 500 MiB with ingress's default 1 MiB
// max_body_bytes, 12.5 GB with GitHub's 25 MB, however many requests. The
// admin API runs inside `inlet ingress` (cmd/inlet/ingress.go: startAdmin),
// whose memory docs/configuration.md says is bounded "whatever the
// concurrency", with a Go soft limit of 112 MiB by default: one auditor's
// verify of a busy day of large GitHub pushes drives that process past its
// limit (the collector then runs without pause) and, with a few at once,
// out of memory, taking ingress down with it.
// Setup: 64 signed-looking stripe events of ~1 MB each (64 MB stored);
// POST /api/events/verify {"since":"1h"} through the real admin API over the
// operator role, with the live heap sampled (after a GC) as each result set
// has been read; 16 events first, then 64.
// Expected: the live heap grows by a bounded amount (a byte budget per read,
// or one large body at a time): at most 24 MiB for 64 MB of bodies.
// Observed: growth 16.5 MiB over 16 events, 61.5 MiB over 64 events (0.96
// MiB per event, the bodies' size: the whole batch's bodies live at once).
// Fixed: AdminEventsToVerify pages by bytes as well as rows: a page stops
// before the row whose body and headers take it past batchBytes (8 MiB),
// keeping at least one row, and Reverify goes on after the last row
// returned while a page was full or cut.
func TestVerifyHoldsABoundedPageOfBodies(t *testing.T) {
	b := setup(t)
	probe := &heapProbe292{DB: b.op}
	post := api292(t, b, probe)

	measure := func(n int) int64 {
		t.Helper()
		base := probe.reset()
		status, body := post("/api/events/verify", `{"since":"1h"}`)
		if status != http.StatusOK || !strings.Contains(body, fmt.Sprintf(`"checked":%d`, n)) {
			t.Fatalf("verify: %d %.300s", status, body)
		}
		return int64(probe.peakNow()) - int64(base)
	}
	insertLarge292(t, b, 1, 16)
	g16 := measure(16)
	insertLarge292(t, b, 17, 48)
	g64 := measure(64)
	t.Logf("live heap growth while verifying: %.1f MiB over 16 events of ~1 MB, %.1f MiB over 64", mib292(g16), mib292(g64))
	if limit := int64(24 << 20); g64 > limit {
		t.Errorf("re-verifying 64 events of ~1 MB held %.1f MiB at once (%.1f MiB for 16): the whole batch of bodies, "+
			"up to 500 × max_body_bytes per request in the process that runs ingress; want at most %.0f MiB",
			mib292(g64), mib292(g16), mib292(limit))
	}
}

// TestCatchUpHoldsABoundedPageOfBodies (review helper-292, fixed).
// Defect: a handler's catch-up over events its filtered subscription
// matches (POST /api/replay {"handler":…}, inlet replay --handler H, a dry
// run included; the way a new consumer with a filter picks up what arrived
// before it) holds the raw bodies and headers of up to 500 candidate events
// at once (admin/replayfilter.go:missingFiltered reads
// AdminMissingFilteredCandidates, raw_body included, batchSize = 500 rows,
// before it parses and filters them one by one). Same process and same
// bound as the verify: 500 × max_body_bytes (500 MiB by default) in the
// `inlet ingress` process whose memory the docs say is bounded.
// Setup: 64 stripe charge.succeeded events of ~1 MB (64 MB), then a
// filtered subscription of handler "late" ('payload.data.object.amount >
// 10000', which each passes); POST /api/replay {"handler":"late",
// "source":"stripe","dry_run":true}, live heap sampled after each result
// set is read; 16 events first, then 64.
// Expected: growth bounded by a byte budget: at most 24 MiB for 64 MB.
// Observed: growth 16.7 MiB over 16 events, 61.5 MiB over 64 (all bodies of
// the batch live together).
// Fixed: AdminMissingFilteredCandidates pages by bytes as well as rows
// (batchBytes, at least one row; missingFiltered goes on after the last row
// returned while a page was full or cut), and reads a body over
// filter.MaxPayload, which a filter never parses, as NULL.
func TestCatchUpHoldsABoundedPageOfBodies(t *testing.T) {
	b := setup(t)
	probe := &heapProbe292{DB: b.op}
	post := api292(t, b, probe)

	measure := func(n int) int64 {
		t.Helper()
		base := probe.reset()
		status, body := post("/api/replay", `{"handler":"late","source":"stripe","dry_run":true,"max_jobs":100000}`)
		if status != http.StatusOK || !strings.Contains(body, fmt.Sprintf(`"created":%d`, n)) {
			t.Fatalf("replay dry run: %d %.300s", status, body)
		}
		return int64(probe.peakNow()) - int64(base)
	}
	insertLarge292(t, b, 1, 16)
	b.exec(t, `INSERT INTO webhook_ingress.subscriptions (handler, provider_pattern, event_type_pattern, max_attempts, filter)
		VALUES ('late', 'stripe', 'charge.*', 5, 'payload.data.object.amount > 10000')`)
	g16 := measure(16)
	insertLarge292(t, b, 17, 48)
	g64 := measure(64)
	t.Logf("live heap growth in the catch-up's dry run: %.1f MiB over 16 events of ~1 MB, %.1f MiB over 64", mib292(g16), mib292(g64))
	if limit := int64(24 << 20); g64 > limit {
		t.Errorf("a catch-up over 64 events of ~1 MB held %.1f MiB at once (%.1f MiB for 16): the whole batch of bodies, "+
			"up to 500 × max_body_bytes per request in the process that runs ingress; want at most %.0f MiB",
			mib292(g64), mib292(g16), mib292(limit))
	}
}
