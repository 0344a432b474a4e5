package reporter_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/internal/database"
	"github.com/inlet-dev/inlet/internal/testwait"
)

// TestAttemptWithAnUnlistedErrorClassIsReported proves that a finished
// attempt whose error_class is not in consumers.Classes() is dropped from
// the report for good: the cursor moves past it and the control plane never
// learns of it, so its page shows the job in the state before (here
// "failed", while the job is a dead letter).
//
// Regression test (review helper-208; this describes the code before the
// fix, and it failed then: 2 of 3 attempts). Defect:
// job_attempts.error_class is free text with no CHECK, and webhook_worker (any consumer, e.g. one not on the Go SDK, or a newer SDK
// during a rolling upgrade that adds a class, as "transaction" was added)
// may INSERT any value. Reporter.collect (reporter/reporter.go, the
// rec.Validate() branch after rec.ErrorClass = consumers.ErrorClass(...))
// treats the whole record as invalid and skips it by id. docs/operations.md
// lists as skipped only rows whose time is not finite or outside years
// 1-9999, and says "each attempt is reported once wherever it is"; the
// outcome, attempt number, times and duration of this attempt are plain
// metadata that could be sent. Only the class cannot.
//
// Expected: the attempt is reported (outcome dead_letter), with its class
// reduced to a value of the fixed list (or absent), never lost.
//
// Fixed: collect sends a class outside the list as handler_error (the
// class the SDK gives an error it cannot classify, which every control
// plane accepts) and logs the attempt's id, never the class.
func TestAttemptWithAnUnlistedErrorClassIsReported(t *testing.T) {
	t.Parallel()
	d, cp := newDataPlane(t), newControlPlane(t)
	ctx := context.Background()
	worker, err := database.Open(ctx, d.url, database.Options{Role: "webhook_worker"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(worker.Close)
	job, later := d.job(t), d.job(t)
	for _, a := range []struct {
		n              int
		outcome, class string
	}{{1, "failed", "timeout"}, {2, "dead_letter", "rate_limited"}} {
		if _, err := worker.Exec(ctx, insertAttempt, job, a.n, "worker-py", time.Now().Add(-25*time.Millisecond), a.outcome, a.class, errorText); err != nil {
			t.Fatalf("the consumer role records attempt %d: %v", a.n, err)
		}
	}
	d.complete(t, d.super, later, 1)
	startReporter(t, d, cp, nil)

	want := len(d.attemptIDs(t))
	// Before the fix the later completion was stored and the dead_letter
	// attempt never: the cursor had passed it. Every attempt must arrive,
	// the unlisted class as handler_error.
	var rows []storedRow
	testwait.Eventually(t, 10*time.Second, "every attempt reported", func() (bool, string) {
		rows = cp.rows(t)
		var seen []string
		for _, r := range rows {
			seen = append(seen, fmt.Sprintf("%d:%s", r.attemptID, r.outcome))
		}
		return len(rows) >= want, fmt.Sprintf("%d of %d attempts: %v", len(rows), want, seen)
	})
	if len(rows) != want {
		t.Fatalf("control plane holds %d attempts, want %d", len(rows), want)
	}
	for _, r := range rows {
		if r.outcome != "dead_letter" {
			continue
		}
		if r.errorClass == nil || *r.errorClass != "handler_error" {
			t.Errorf("the dead_letter attempt's class (rate_limited in the row) is stored as %v, want handler_error", r.errorClass)
		}
	}
}
