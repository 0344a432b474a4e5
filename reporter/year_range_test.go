package reporter_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/internal/database"
	"github.com/inlet-dev/inlet/reporter"
)

// TestAFiniteTimeOutsideJSONRangeDoesNotStopReporting (review helper-138,
// fixed; this describes the code before the fix): one attempt row with a
// finite time whose year is outside 0..9999 (PostgreSQL accepts 4713 BC ..
// 294276 AD) stopped the reporter for good: no later attempt of the data
// plane was ever reported.
//
// Defect: webhook_worker, so any consumer written outside the SDK, may
// INSERT job_attempts rows with its own started_at and finished_at
// (005_partitions grants INSERT (..., started_at, finished_at, ...)). A row
// with started_at = finished_at = '10000-01-01' is finite, so 050's
// finite_or_zero passed it through; Record.Validate accepted it (not zero,
// finished not before started, duration 0); then Reporter.send's
// json.Marshal (reporter/reporter.go, send: "body, err := json.Marshal(...)")
// failed with "Time.MarshalJSON: year outside of range [0,9999]", and
// Reporter.run retried that same batch forever (r.retry(ctx, "send", ...)),
// so the cursor never moved past it. This is the same poison-row class that
// 050_reporter_finite_times fixed for 'infinity' (TestAnInfiniteTimestamp
// DoesNotStopReporting); docs/operations.md promises such a row "is skipped
// and logged by id".
//
// Now: Record.Validate refuses times outside years 1..9999, so the bad rows
// (year 10000, and a BC year) are skipped (logged by id), and the good
// attempt after them is reported.
func TestAFiniteTimeOutsideJSONRangeDoesNotStopReporting(t *testing.T) {
	t.Parallel()
	d, cp := newDataPlane(t), newControlPlane(t)
	ctx := context.Background()
	worker, err := database.Open(ctx, d.url, database.Options{Role: "webhook_worker"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(worker.Close)

	future, past, good := d.job(t), d.job(t), d.job(t)
	// A consumer outside the SDK, with the worker role, records failed
	// attempts with a bogus (but finite) clock.
	for _, bad := range []struct {
		job  int64
		when string
	}{{future, "10000-01-01 00:00:00+00"}, {past, "0100-01-01 00:00:00+00 BC"}} {
		if _, err := worker.Exec(ctx, `INSERT INTO webhook_ingress.job_attempts
			(job_id, event_received_at, attempt, worker_id, started_at, finished_at, outcome, error_class)
			SELECT id, event_received_at, 1, 'worker-x', $2::timestamptz, $2::timestamptz, 'failed', 'timeout'
			FROM webhook_ingress.jobs WHERE id = $1`, bad.job, bad.when); err != nil {
			t.Fatalf("the worker role cannot write the row (then this is no defect): %v", err)
		}
	}
	d.complete(t, d.super, good, 1)
	startReporter(t, d, cp, nil)
	// The good attempt (and every later one) is reported; the bad rows
	// skipped.
	cp.waitStored(t, 1)
	if rows, want := cp.rows(t), reporter.OpaqueJobID([]byte(hmacKey), good); len(rows) != 1 || rows[0].job != want {
		t.Fatalf("control plane holds %d records (first job %s), want only the good job's %s", len(rows), rows[0].job, want)
	}
}

// TestRecordValidateYearRange: a time JSON cannot carry (a year outside
// 0..9999 in the time's own zone, which Time.MarshalJSON writes) is refused,
// and so is a year before 1, the first PostgreSQL and RFC 3339 agree on.
func TestRecordValidateYearRange(t *testing.T) {
	t.Parallel()
	ok := reporter.Record{AttemptID: 1, Job: strings.Repeat("0", 64), Outcome: reporter.OutcomeCompleted}
	east := time.FixedZone("+14", 14*3600)
	for _, c := range []struct {
		name string
		at   time.Time
		ok   bool
	}{
		{"year 1", time.Date(1, 1, 1, 0, 0, 1, 0, time.UTC), true},
		{"year 9999", time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC), true},
		{"year 10000", time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC), false},
		{"year 0 (1 BC)", time.Date(0, 6, 1, 0, 0, 0, 0, time.UTC), false},
		{"year -99 (100 BC)", time.Date(-99, 1, 1, 0, 0, 0, 0, time.UTC), false},
		{"year 10000 in its zone, 9999 in UTC", time.Date(10000, 1, 1, 1, 0, 0, 0, east), false},
	} {
		r := ok
		r.StartedAt, r.FinishedAt = c.at, c.at
		err := r.Validate()
		if (err == nil) != c.ok {
			t.Errorf("%s: Validate() = %v, want ok %v", c.name, err, c.ok)
		}
		if _, jerr := json.Marshal(r); err == nil && jerr != nil {
			t.Errorf("%s: valid, but not encodable: %v", c.name, jerr)
		}
	}
}
