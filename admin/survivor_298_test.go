package admin_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/admin"
	"github.com/inlet-dev/inlet/filter"
)

// byteCounter298 is the operator's real pool, counting the bytes of every
// value the result sets of its transactions return (the raw column values
// as PostgreSQL sent them): what a reader fetched into the process.
type byteCounter298 struct {
	admin.DB
	bytes atomic.Int64
}

func (c *byteCounter298) BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error) {
	tx, err := c.DB.BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	return &countedTx298{Tx: tx, c: c}, nil
}

type countedTx298 struct {
	pgx.Tx
	c *byteCounter298
}

func (t *countedTx298) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	rows, err := t.Tx.Query(ctx, sql, args...)
	if err != nil {
		return rows, err
	}
	return &countedRows298{Rows: rows, c: t.c}, nil
}

type countedRows298 struct {
	pgx.Rows
	c *byteCounter298
}

func (r *countedRows298) Next() bool {
	if !r.Rows.Next() {
		return false
	}
	var n int64
	for _, v := range r.Rows.RawValues() {
		n += int64(len(v))
	}
	r.c.bytes.Add(n)
	return true
}

// TestSurvivor298_CatchUpDoesNotReadBodiesOverMaxPayload (mutation run,
// helper-298).
// Guarantee: a filtered catch-up (POST /api/replay {"handler":…}, inlet
// replay --handler) does not read a stored body over filter.MaxPayload
// into the ingress process: AdminMissingFilteredCandidates returns it as
// NULL (its max_payload), since no filter parses such a body (108aeb2,
// review helper-292).
// Mutant: admin/replayfilter.go:66 (at 2be9df6) passes MaxPayload: 1 << 40 instead of
// filter.MaxPayload: every body over 1 MiB is fetched whole again (a page
// of up to batchBytes, plus the row that crosses it).
// Why missed: filter.ParsePayload returns nil for a body over MaxPayload
// anyway, so the catch-up's outcome (the jobs it creates) is the same
// either way, and TestCatchUpHoldsABoundedPageOfBodies stores bodies of
// ~1 MB, under MaxPayload, and bounds only a page's bytes. Here the bytes
// the catch-up's statements return are counted: six bodies of 2 MiB must
// not be read at all.
func TestSurvivor298_CatchUpDoesNotReadBodiesOverMaxPayload(t *testing.T) {
	b := setup(t)
	counter := &byteCounter298{DB: b.op}
	api, err := admin.NewAPI(admin.APIConfig{Token: apiToken, DB: counter, Sources: b.sources, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api.Handler())
	t.Cleanup(srv.Close)

	const big = 2 * filter.MaxPayload
	// Six events whose bodies are over MaxPayload, and one small one the
	// filter passes: the catch-up still reads and filters what it may.
	b.exec(t, `INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, event_type, headers, raw_body, signature_verified, secret_index, request_uri)
		SELECT 'stripe', 'stripe', 'evt_big_'||g, 'charge.succeeded', '{}',
		       convert_to('{"data":{"object":{"amount":25000}},"pad":"'||repeat('x', $1::int)||'"}', 'UTF8'),
		       true, 0, '/webhooks/stripe'
		FROM generate_series(1, 6) g`, big)
	b.exec(t, `INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, event_type, headers, raw_body, signature_verified, secret_index, request_uri)
		VALUES ('stripe', 'stripe', 'evt_small', 'charge.succeeded', '{}', convert_to('{"data":{"object":{"amount":25000}}}', 'UTF8'),
		        true, 0, '/webhooks/stripe')`)
	b.exec(t, `INSERT INTO webhook_ingress.subscriptions (handler, provider_pattern, event_type_pattern, max_attempts, filter)
		VALUES ('late', 'stripe', 'charge.*', 5, 'payload.data.object.amount > 10000')`)

	req, err := http.NewRequest(http.MethodPost, srv.URL+"/api/replay", strings.NewReader(`{"handler":"late","source":"stripe","dry_run":true}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+apiToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"created":1`) {
		t.Fatalf("replay dry run: %d %.300s; want 200 and the small event alone created", resp.StatusCode, body)
	}
	if got := counter.bytes.Load(); got > filter.MaxPayload {
		t.Errorf("the catch-up read %d bytes from PostgreSQL for 6 bodies of %d bytes (over filter.MaxPayload, %d, which no filter parses) and a small one; "+
			"want at most %d: a body over MaxPayload is read as NULL", got, big, filter.MaxPayload, filter.MaxPayload)
	}
}
