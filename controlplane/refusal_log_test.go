package controlplane_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inlet-dev/inlet/controlplane"
	"github.com/inlet-dev/inlet/internal/pgtest"
	"github.com/inlet-dev/inlet/reporter"
)

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) { s.mu.Lock(); defer s.mu.Unlock(); return s.b.Write(p) }
func (s *syncBuf) String() string              { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// Config.Logger promises "tenant names, counts and refusal reasons, never a
// token or a record": a refused record's value (here a webhook body and a
// token-like secret in "outcome", ~1 MiB) and an unknown field's name stay
// out of the log. (Found by a review: both were logged verbatim.)
func TestRefusedRecordValueIsNotLogged(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, pgtest.NewEmptyDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if _, err := controlplane.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	var logs syncBuf
	srv, err := controlplane.New(controlplane.Config{Pool: pool, Logger: slog.New(slog.NewJSONHandler(&logs, nil)),
		Tenants: []controlplane.Tenant{{Name: "alpha", Token: tokenA}}})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)

	secret := `{"customer":"cus_SECRET","card":"4242424242424242"}` + strings.Repeat("x", 1<<20)
	rec := record(1, reporter.Outcome(secret), "")
	body, _ := json.Marshal(reporter.Batch{Records: []reporter.Record{rec}})
	// an unknown field's name is attacker-chosen too
	body2 := []byte(`{"records":[],"cus_SECRET_FIELD_` + strings.Repeat("y", 1<<16) + `":1}`)
	for _, b := range [][]byte{body, body2} {
		req, _ := http.NewRequest(http.MethodPost, hs.URL+"/api/v1/reports", bytes.NewReader(b))
		req.Header.Set("Authorization", "Bearer "+tokenA)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Fatalf("status %d, want 400", resp.StatusCode)
		}
	}
	out := logs.String()
	if strings.Contains(out, "cus_SECRET") || strings.Contains(out, "4242424242424242") || len(out) > 8192 {
		t.Fatalf("control plane log carries the refused record's values (%d bytes of log; contains cus_SECRET: %v, card: %v)",
			len(out), strings.Contains(out, "cus_SECRET"), strings.Contains(out, "4242424242424242"))
	}
}
