package controlplane_test

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inlet-dev/inlet/controlplane"
	"github.com/inlet-dev/inlet/internal/pgtest"
)

// TestRefusedNumberValueIsNotLogged (review helper-138, fixed; this
// describes the code before the fix): a refused record's value still
// reached the control plane's log (and its 400 answer) verbatim when it was
// a JSON number: a card number as "attempt_id": 4242424242424242.5, or a
// 1 MiB run of digits that floods the log with every request.
//
// Defect: Config.Logger's doc promises "tenant names, counts and refusal
// reasons, never a token or a record", and TestRefusedRecordValueIsNotLogged
// fixed the string case (decodeBatch names places only). But decodeBatch
// (controlplane/server.go, the *json.UnmarshalTypeError case) formatted
// typ.Value into the reason, and encoding/json sets UnmarshalTypeError.Value
// to "number " + the literal itself for a number that does not fit the
// field (a fraction or an overflow in an int field, 1e999 in a float
// field). postReports then logged that reason (s.log.Warn("report
// refused", ..., "reason", ...)) and wrote it into the answer. A tenant (or
// anyone holding a tenant token) could so write ~2 MiB of its choosing into
// the operator's log per request. The reason also said "a JSON number where
// the batch has none" of a field that takes a number.
//
// Now: the reason names the field and the JSON kind ("a JSON number that
// does not fit it (it takes a whole number in range ...)"), never the
// literal; the log stays small and free of the value.
func TestRefusedNumberValueIsNotLogged(t *testing.T) {
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

	card := `{"records":[{"attempt_id":4242424242424242.5,"job":"1","outcome":"completed","attempt":1,"duration_ms":1,` +
		`"started_at":"2026-01-01T00:00:00Z","finished_at":"2026-01-01T00:00:00Z"}]}`
	flood := `{"records":[{"attempt_id":1` + strings.Repeat("9", 1<<20) + `}]}`
	var answers []string
	for _, b := range []string{card, flood} {
		req, _ := http.NewRequest(http.MethodPost, hs.URL+"/api/v1/reports", bytes.NewReader([]byte(b)))
		req.Header.Set("Authorization", "Bearer "+tokenA)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var ans bytes.Buffer
		_, _ = ans.ReadFrom(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Fatalf("status %d, want 400", resp.StatusCode)
		}
		// The reason names the field and says the number does not fit it.
		if a := ans.String(); !strings.Contains(a, "records.attempt_id: a JSON number that does not fit it") || strings.Contains(a, "has none") {
			t.Errorf("answer %.300q: want the field named and the number said not to fit it", a)
		}
		if len(ans.String()) > 300 {
			answers = append(answers, ans.String()[:300]+"…")
		} else {
			answers = append(answers, ans.String())
		}
	}
	out := logs.String()
	if strings.Contains(out, "4242424242424242") || len(out) > 8192 {
		t.Fatalf("control plane log carries the refused numbers verbatim: %d bytes of log, card number in it: %v; answers: %q",
			len(out), strings.Contains(out, "4242424242424242"), answers)
	}
}
