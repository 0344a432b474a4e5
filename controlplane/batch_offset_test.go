package controlplane

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inlet-dev/inlet/internal/pgtest"
	"github.com/inlet-dev/inlet/reporter"
)

// TestMalformedRecordIsPlacedAtItsByte (review helper-310, fixed).
// Defect: since a1e79a7 a report refused for malformed JSON inside a record
// names a byte that drifts back by one byte per record before it: the
// records are read with json.Decoder.Token (the '[' and each ',') and
// Decode (each record), and encoding/json's SyntaxError offset from Decode
// counts only the bytes Decode itself scanned, not the delimiters Token and
// Decode's own separator handling consumed. At record 501 the 400 answer
// (and the "report refused" log line) points some 500 bytes early, inside
// record 497; the operator of a data plane debugging a refused batch is
// sent to a well-formed record. The same commit's comment "Place a wrong
// kind of value as in the whole batch" is also off: a type error after the
// first record is placed one byte earlier than encoding/json places it in
// the whole body (the start taken with InputOffset is at the ',', which
// Decode then skips). Root cause: controlplane/server.go:readRecords (start
// := dec.InputOffset() before dec.Decode; SyntaxError offsets passed on
// unadjusted through decodeError).
// Setup: a real control plane (migrated PostgreSQL) behind httptest;
// tenant alpha POSTs json.Marshal(reporter.Batch) of 500 valid records with
// a 501st record appended: (a) `{"attempt_id":1,,}` (malformed), (b)
// `{"attempt_id":"x"}` (a string where a number goes).
// Expected: (a) "malformed JSON at byte N" with N inside the 501st record
// (encoding/json over the whole body, the decoder before a1e79a7, says
// byte 78313, its second ','); (b) the byte encoding/json gives for the whole body.
// Observed: (a) 400 "body: malformed JSON at byte 77810" for the record at
// bytes 78296..78314 of 78316: 486 bytes early, inside record 497
// (whole-body encoding/json: byte 78313); (b) byte 78312, whole-body
// encoding/json 78313. The drift grows with the records before the bad one
// (about one byte each).
// Fixed: a syntax error is placed by scanning the whole body (not decoding
// it); each record is read whole, then decoded from its own bytes, its
// start known, so a wrong kind of value is placed at start + its offset.
func TestMalformedRecordIsPlacedAtItsByte(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, pgtest.NewEmptyDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if _, err := Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	const token = "tenant-alpha-token-310-0123456789"
	srv, err := New(Config{Pool: pool, Tenants: []Tenant{{Name: "alpha", Token: token}}})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)

	// 500 records as the reporter marshals them.
	start := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	recs := make([]reporter.Record, 500)
	for i := range recs {
		recs[i] = reporter.Record{AttemptID: int64(i + 1), Job: strconv.Itoa(i + 1), Outcome: reporter.OutcomeCompleted,
			Attempt: 1, DurationMS: 12.5, StartedAt: start, FinishedAt: start.Add(time.Second)}
	}
	valid, err := json.Marshal(reporter.Batch{Records: recs})
	if err != nil {
		t.Fatal(err)
	}
	withRecord := func(rec string) (body []byte, at int) {
		head := valid[:len(valid)-2] // drop "]}"
		body = append(append([]byte{}, head...), ',')
		body = append(body, rec+"]}"...)
		return body, len(head) + 1
	}
	post := func(body []byte) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, hs.URL+"/api/v1/reports", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(out)
	}
	byteOf := regexp.MustCompile(`at byte (\d+)`)
	reported := func(answer string) int {
		m := byteOf.FindStringSubmatch(answer)
		if m == nil {
			t.Fatalf("answer names no byte: %s", answer)
		}
		n, _ := strconv.Atoi(m[1])
		return n
	}
	// What encoding/json says of the whole body (the decoder before a1e79a7).
	wholeBody := func(body []byte) int64 {
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.DisallowUnknownFields()
		err := dec.Decode(new(reporter.Batch))
		var syn *json.SyntaxError
		var typ *json.UnmarshalTypeError
		switch {
		case errors.As(err, &syn):
			return syn.Offset
		case errors.As(err, &typ):
			return typ.Offset
		}
		t.Fatalf("whole-body decode: %v", err)
		return 0
	}

	t.Run("malformed", func(t *testing.T) {
		rec := `{"attempt_id":1,,}`
		body, at := withRecord(rec)
		code, answer := post(body)
		if code != http.StatusBadRequest {
			t.Fatalf("answer %d %s, want 400", code, answer)
		}
		got, end := reported(answer), at+len(rec)
		t.Logf("record 501 at bytes %d..%d of %d; answer %q; whole-body encoding/json: byte %d", at, end, len(body), answer, wholeBody(body))
		if got < at || got > end {
			t.Errorf("the malformed record is at bytes %d..%d, the answer says byte %d (%d bytes before it: inside record %d)",
				at, end, got, at-got, 1+bytes.Count(body[:got], []byte(`{"attempt_id"`))-1)
		}
	})
	t.Run("wrong kind", func(t *testing.T) {
		body, _ := withRecord(`{"attempt_id":"x"}`)
		code, answer := post(body)
		if code != http.StatusBadRequest {
			t.Fatalf("answer %d %s, want 400", code, answer)
		}
		if got, want := reported(answer), wholeBody(body); int64(got) != want {
			t.Errorf("answer %q places the value at byte %d; encoding/json over the whole batch places it at %d", answer, got, want)
		}
	})
}
