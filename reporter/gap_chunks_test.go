package reporter_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/internal/testwait"
	"github.com/inlet-dev/inlet/reporter"
)

// TestLateAttemptsInManyGapsAreReported: with more gaps than one statement
// of a round looks for (gapChunk, 1,000 runs), late attempts in every run
// are found, and a round whose budget filled up in one chunk goes on in the
// next chunks in the rounds right after it. 2,500 single-id gaps (the odd
// ids; the even ones committed first and reported), then 250 late attempts
// spread over all of them, more than one round's budget in each chunk.
// TestLateAttemptsStarvedByTheGapBudget is the end-to-end case of the
// budget; this one pins the split into statements.
func TestLateAttemptsInManyGapsAreReported(t *testing.T) {
	t.Parallel()
	d, cp := newDataPlane(t), newControlPlane(t)
	ctx := context.Background()
	job := d.job(t)
	const runs = 2500
	// The committed attempts take the even ids 2..5000 (id is an identity
	// column: given here, as the sequence would have handed them out with
	// the odd ones to transactions still open); the sequence moves past
	// them so nothing else draws one.
	if _, err := d.super.Exec(ctx, `INSERT INTO webhook_ingress.job_attempts
		(id, job_id, event_received_at, attempt, worker_id, started_at, outcome, error_class, error)
		OVERRIDING SYSTEM VALUE SELECT 2*g, j.id, j.event_received_at, 1, 'worker-1', now() - interval '25 milliseconds', 'failed', 'timeout', $3
		FROM webhook_ingress.jobs j, generate_series(1, $2::int) g WHERE j.id = $1`, job, runs, errorText); err != nil {
		t.Fatal(err)
	}
	if _, err := d.super.Exec(ctx, `SELECT setval('webhook_ingress.job_attempts_id_seq', $1)`, 2*runs); err != nil {
		t.Fatal(err)
	}
	startReporter(t, d, cp, func(c *reporter.Config) {
		// A budget of 100 gap records a round; GapTTL out of the way.
		c.BatchSize, c.GapTTL = 200, time.Hour
	})
	cp.waitStored(t, runs) // the cursor is past every odd id: 2,500 gaps

	// Every tenth odd id commits now: 100 in each of the first two chunks
	// of gaps, 50 in the last.
	if _, err := d.super.Exec(ctx, `INSERT INTO webhook_ingress.job_attempts
		(id, job_id, event_received_at, attempt, worker_id, started_at, outcome, error_class, error)
		OVERRIDING SYSTEM VALUE SELECT g, j.id, j.event_received_at, 2, 'worker-1', now() - interval '25 milliseconds', 'dead_letter', 'timeout', $2
		FROM webhook_ingress.jobs j, generate_series(1, $3::int, 20) g WHERE j.id = $1`, job, errorText, 2*runs); err != nil {
		t.Fatal(err)
	}

	want := d.attemptIDs(t)
	var got []int64
	testwait.Eventually(t, 20*time.Second, "every late attempt reported", func() (bool, string) {
		got = got[:0]
		for _, r := range cp.rows(t) {
			got = append(got, r.attemptID)
		}
		return len(got) >= len(want), fmt.Sprintf("%d of %d records", len(got), len(want))
	})
	if !slices.Equal(got, want) {
		t.Fatalf("control plane holds %d attempts, data plane has %d", len(got), len(want))
	}
}
