package admin_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/admin"
)

// TestRequestTimeoutCancelsItsStatement (review helper-295, fixed).
// Defect: APIConfig.RequestTimeout is documented as "bounds one request's
// database work" (admin/api.go), and a request past it is answered 503
// with Retry-After: 5. But the deadline only cuts the client side: pgx's
// default context handler (pgconn DeadlineContextWatcherHandler, kept by
// internal/database.Open) sets a deadline on the socket and drops the
// connection; it never sends PostgreSQL a cancel request, and nothing sets
// a statement_timeout (admin/admin.go:readTx/writeTx). PostgreSQL does not
// notice a dropped client while a statement computes, so the statement runs
// to its end. A heavy --where path (GET /api/events?where=..., inlet events
// list --where) that times out keeps a backend busy for as long as the path
// takes; once the pool has dropped the dead connection (a few seconds) each
// retry the 503 invites starts another on a fresh connection, so the
// abandoned work piles up past the pool's MaxConns on the customer's
// production database.
// Setup: one stored event whose payload is {"a":[1..25000],"b":[25001..50000]};
// the admin API over the operator pool (MaxConns 4) with RequestTimeout 1s;
// GET /api/events?where=$.a[*] == $.b[*] (6.25e8 comparisons, ~30 s in
// PostgreSQL) four times, each answered 503; then, once the API answers a
// plain list again, four more.
// Expected: a request answered is a request whose statement is gone: 10 s
// after the last answer no backend runs AdminListEventsWhere.
// Observed: 503 after 1.00 s each; 8 backends running the statement when
// the eighth was answered (twice the pool's 4 connections), 8 still 10 s
// later.
// Fixed: every pool of internal/database.Open sends PostgreSQL a cancel
// request the moment a statement's context ends (pgconn's
// CancelRequestContextWatcherHandler); the admin API waits up to 30 s
// (database.WithCancelWait) for the server to stop the statement before it
// answers and before the connection is dropped (this path takes the cancel
// only once the comparison ends: PostgreSQL checks for one between steps),
// and admin readTx/writeTx (and the dashboard's reads) SET LOCAL
// statement_timeout from the context's deadline as a second line.
func TestRequestTimeoutCancelsItsStatement(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	const n = 25000
	b.exec(t, `INSERT INTO webhook_ingress.events
		(provider, scheme, external_event_id, event_type, raw_body, signature_verified, payload)
		SELECT 'stripe', 'stripe', 'evt_heavy', 'charge.succeeded', convert_to(p::text, 'UTF8'), true, p
		FROM (SELECT jsonb_build_object('a', (SELECT jsonb_agg(g) FROM generate_series(1, $1::int) g),
		                                'b', (SELECT jsonb_agg(g) FROM generate_series($1::int + 1, 2 * $1::int) g)) AS p) x`, n)
	running := func() int {
		return b.count(t, `SELECT count(*)::int FROM pg_stat_activity
			WHERE datname = current_database() AND state = 'active' AND query LIKE '%AdminListEventsWhere%'
			  AND pid <> pg_backend_pid()`)
	}
	t.Cleanup(func() {
		_, _ = b.super.Exec(context.Background(), `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
			WHERE datname = current_database() AND query LIKE '%AdminListEventsWhere%' AND pid <> pg_backend_pid()`)
	})

	api, err := admin.NewAPI(admin.APIConfig{Token: apiToken, DB: b.op, Sources: b.sources,
		Logger: slog.New(slog.DiscardHandler), RequestTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api.Handler())
	t.Cleanup(srv.Close)
	get := func(path string) (int, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+apiToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	heavy := "/api/events?where=" + url.QueryEscape(`$.a[*] == $.b[*]`)
	sent := 0
	burst := func() {
		t.Helper()
		for range 4 {
			start := time.Now()
			status, body := get(heavy)
			if status != http.StatusServiceUnavailable {
				t.Fatalf("heavy request %d: %d %.200s (want the 503 of a request past its 1 s timeout)", sent+1, status, body)
			}
			sent++
			t.Logf("heavy request %d: %d after %v", sent, status, time.Since(start).Round(time.Millisecond))
		}
	}
	burst()
	// The retry an operator (or script) makes once the API answers again.
	for deadline := time.Now().Add(60 * time.Second); ; {
		if status, _ := get("/api/events?limit=1"); status == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the API never answered a plain list again")
		}
		time.Sleep(250 * time.Millisecond)
	}
	burst()
	answered := time.Now()
	peak := running()
	t.Logf("backends running the --where statement when the last request was answered: %d", peak)
	left := peak
	for deadline := answered.Add(10 * time.Second); left > 0 && time.Now().Before(deadline); left = running() {
		time.Sleep(200 * time.Millisecond)
	}
	if left > 0 {
		t.Errorf("%.0f s after the last of %d requests was answered 503 (RequestTimeout 1s), %d backends still run their "+
			"--where statement (%d when it was answered; the operator pool holds at most 4 connections): a timed-out "+
			"request's database work is never cancelled, and each retry adds more", time.Since(answered).Seconds(), sent, left, peak)
	}
}

// TestByteCutCountsHeadersText (review helper-295, fixed).
// Defect: the 8 MiB page cut of re-verification and of a filtered catch-up
// (commit 108aeb2; schema/queries/admin.sql AdminEventsToVerify and
// schema/queries/filters.sql AdminMissingFilteredCandidates, read by
// admin/verify.go:Reverify and admin/replayfilter.go:missingFiltered) counts
// a row's headers as pg_column_size(headers): their stored, compressed size.
// What the admin API receives and holds is the uncompressed JSON text
// (decoded again into maps). Headers are the sender's: ingress stores up to
// 32 KiB of them (ingress.MaxHeaderBytes), which JSON-escape to as much as
// 64 KiB and compress to a few hundred bytes when repetitive. A page of 500
// such events "costs" ~190 KB against the 8 MiB budget and is read whole:
// ~30 MB, in the ingress process whose memory the cut was added to bound
// ("holds a bounded number of bytes ... whatever the bodies' size").
// Setup: 500 stripe events with a 30,000-character header value of '"'
// (60 KB of JSON text each, ~385 bytes stored); POST /api/events/verify
// {"since":"1h"} and POST /api/replay {"handler":"late","source":"stripe",
// "dry_run":true} (a filtered subscription matching them) through the real
// API, live heap sampled after each result set as in memory_bounds_test.go.
// Expected: growth within the 24 MiB that test allows for an 8 MiB budget.
// Observed: 31.6 MiB for the verify and 31.6 MiB for the catch-up (one
// page of all 500 rows: 28.6 MiB of header text counted as 0.18 MiB).
// Fixed: both queries count a row's headers as octet_length(headers::text),
// their JSON text, in the cut.
func TestByteCutCountsHeadersText(t *testing.T) {
	b := setup(t)
	b.exec(t, `INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, event_type, headers, raw_body, signature_verified, secret_index, request_uri)
		SELECT 'stripe', 'stripe', 'evt_hdr_'||g, 'charge.succeeded', jsonb_build_object('X-Pad', jsonb_build_array(repeat('"', 30000))),
		       convert_to('{"data":{"object":{"amount":25000}},"n":'||g||'}', 'UTF8'), true, 0, '/webhooks/stripe'
		FROM generate_series(1, 500) g`)
	b.exec(t, `INSERT INTO webhook_ingress.subscriptions (handler, provider_pattern, event_type_pattern, max_attempts, filter)
		VALUES ('late', 'stripe', 'charge.*', 5, 'payload.data.object.amount > 10000')`)
	stored := b.count(t, `SELECT sum(pg_column_size(headers))::int FROM webhook_ingress.events`)
	text := b.count(t, `SELECT sum(octet_length(headers::text))::int FROM webhook_ingress.events`)
	t.Logf("headers of the 500 events: %.2f MiB stored (what the cut counts), %.1f MiB as text (what is read)",
		mib292(int64(stored)), mib292(int64(text)))
	probe := &heapProbe292{DB: b.op}
	post := api292(t, b, probe)
	for _, c := range []struct{ name, path, body, want string }{
		{"verify", "/api/events/verify", `{"since":"1h"}`, `"checked":500`},
		{"catch-up", "/api/replay", `{"handler":"late","source":"stripe","dry_run":true,"max_jobs":100000}`, `"created":500`},
	} {
		base := probe.reset()
		status, body := post(c.path, c.body)
		if status != http.StatusOK || !strings.Contains(body, c.want) {
			t.Fatalf("%s: %d %.300s", c.name, status, body)
		}
		growth := int64(probe.peakNow()) - int64(base)
		t.Logf("%s: live heap growth %.1f MiB", c.name, mib292(growth))
		if limit := int64(24 << 20); growth > limit {
			t.Errorf("%s held %.1f MiB at once for a page cut at 8 MiB (want at most %.0f MiB): the cut counted the "+
				"headers' compressed size (%.2f MiB for all 500) while %.1f MiB of header text was read in one page",
				c.name, mib292(growth), mib292(limit), mib292(int64(stored)), mib292(int64(text)))
		}
	}
}
