package controlplane

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inlet-dev/inlet/internal/pgtest"
	"github.com/inlet-dev/inlet/reporter"
)

// TestOversizeBatchIsRefusedBeforeItIsDecodedWhole (review helper-306, fixed).
// Defect: one report of 2 MiB (under maxBody) made of empty records,
// {"records":[{},{},…]}, is decoded whole into ~700,000 reporter.Record
// values (152 bytes each, the slice grown step by step) before
// Batch.Validate counts them and refuses more than MaxBatch (1,000): one
// request makes the multi-tenant control plane allocate hundreds of MiB,
// ~250 times its body. A few of them at once from one tenant (a buggy or
// hostile data plane, or a leaked tenant token) take the process, and every
// other tenant's reporting and pages with it; the doc's "oversize batches
// are refused with 400" holds only after the damage. Root cause:
// controlplane/server.go:decodeBatch (json.Decoder.Decode of the whole
// Batch, then Batch.Validate).
// Setup: a real control plane (migrated PostgreSQL database) behind
// httptest; tenant alpha POSTs a 2 MiB body of 699,000 empty records;
// runtime.MemStats.TotalAlloc is read around that one request.
// Expected: 400 (too many records), and no more memory than a few times the
// body (here: under 64 MiB): the records array is counted as it is read and
// refused at record MaxBatch+1.
// Observed: 400 "699046 records, at most 1000 per batch", after 585 MiB
// were allocated for the one 2,097,151-byte request (293x the body).
// Fixed: readRecords decodes one record at a time and refuses the batch at
// record MaxBatch+1 (9 MiB allocated for the same request).
func TestOversizeBatchIsRefusedBeforeItIsDecodedWhole(t *testing.T) {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, pgtest.NewEmptyDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if _, err := Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	const token = "tenant-alpha-token-306-0123456789"
	srv, err := New(Config{Pool: pool, Tenants: []Tenant{{Name: "alpha", Token: token}}})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)

	// {"records":[{},{},...,{}]} just under maxBody.
	const prefix, suffix = `{"records":[`, `]}`
	n := (maxBody - len(prefix) - len(suffix)) / 3
	var body bytes.Buffer
	body.WriteString(prefix)
	body.WriteString(strings.Repeat("{},", n-1))
	body.WriteString("{}")
	body.WriteString(suffix)
	if body.Len() > maxBody {
		t.Fatalf("body %d bytes, over maxBody %d", body.Len(), maxBody)
	}
	if n <= reporter.MaxBatch {
		t.Fatalf("only %d records", n)
	}
	payload := body.Bytes()

	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	req, err := http.NewRequest(http.MethodPost, hs.URL+"/api/v1/reports", bytes.NewReader(payload))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	answer, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	runtime.ReadMemStats(&after)

	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("answer %d %s, want 400 (more than %d records)", resp.StatusCode, answer, reporter.MaxBatch)
	}
	allocated := after.TotalAlloc - before.TotalAlloc
	const most = 64 << 20
	t.Logf("%d empty records in %d bytes: answer %d %s; %d MiB allocated while serving it",
		n, len(payload), resp.StatusCode, strings.TrimSpace(string(answer)), allocated>>20)
	if allocated > most {
		t.Errorf("refusing one %d-byte batch of %d records allocated %d MiB (%.0fx the body), want at most %d MiB: "+
			"the whole array is decoded before MaxBatch (%d) is checked, so a few such reports at once exhaust the control plane's memory for every tenant",
			len(payload), n, allocated>>20, float64(allocated)/float64(len(payload)), most>>20, reporter.MaxBatch)
	}
}
