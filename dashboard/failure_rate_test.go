package dashboard_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/internal/database"
	"github.com/inlet-dev/inlet/internal/pgtest"
	"github.com/inlet-dev/inlet/schema"
	"github.com/inlet-dev/inlet/schema/queries"
)

// TestFailureRateCountsAttemptsTheReaperEnded (review helper-253, fixed).
//
// Defect: the overview's "Failure rate (1h)" (docs/operations.md,
// Dashboard: "handlers with their open jobs, lag and last-hour failure
// rate"; its tooltip: "Failed and dead-lettered attempts of all attempts
// finished in the last hour") counts only job_attempts outcomes 'failed'
// and 'dead_letter' as failures, while every attempt whose handler ran and
// never reported (its consumer crashed on the job, hung, was OOM-killed)
// is closed by the reaper as 'lease_expired', also the last one that
// dead-letters the job. Those attempts count in the denominator only: a
// handler that crashes its consumer on every job (a poison event) shows
// "0% 0/3" and no "bad" mark while its jobs are dead-lettered. Root cause:
// schema/queries/dashboard.sql DashboardHandlers, the attempts CTE
// (`FILTER (WHERE outcome IN ('failed', 'dead_letter'))`), shown by
// dashboard/stats.go handlerStats.
//
// Setup: handler billing (max_attempts 3) with a live consumer; one event;
// its job claimed by the real ClaimJobs (as webhook_streamer), the lease
// run out, and reaped by the real ReapExpiredLeases, three times: three
// lease_expired attempts, the job dead-lettered by the last.
//
// Expected: billing's failures 3 of 3 attempts (at least the attempt that
// dead-lettered the job counted as a failure), failure rate > 0.
//
// Observed: data-attempts="3" data-failures="0" data-failure-rate="0.0000"
// while the job is dead_letter.
//
// Fixed: DashboardHandlers counts 'lease_expired' among the failures
// (`outcome IN ('failed', 'dead_letter', 'lease_expired')`; the reaper
// writes that row only for an attempt it counted), and the column's
// tooltip and docs/operations.md say so.
func TestFailureRateCountsAttemptsTheReaperEnded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	super, err := database.Open(ctx, url, database.Options{MaxConns: 4, AppName: "failure-rate-super"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(super.Close)
	op, err := database.Open(ctx, url, database.Options{Role: schema.OperatorRole, MaxConns: 4, AppName: "failure-rate-operator"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(op.Close)
	str, err := database.Open(ctx, url, database.Options{Role: schema.StreamerRole, MaxConns: 4, AppName: "failure-rate-streamer"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(str.Close)
	b := &testBundle{super: super, op: op, now: time.Now().Truncate(time.Second)}
	b.base = serve(t, op, options{sources: []string{"stripe"}}, func() time.Time { return time.Now() })

	b.subscribe(t, "billing", "stripe") // max_attempts 3
	// A consumer of billing alive throughout (as ConsumerAlive writes it):
	// every expired lease is an attempt that ran.
	b.exec(t, `INSERT INTO webhook_ingress.consumers (handler, worker_id, seen_at, alive_until)
		VALUES ('billing', 'w1', now() + interval '1 hour', now() + interval '1 hour')`)
	ev := b.insert(t, "stripe", "evt_poison", []byte(`{}`), time.Now().Add(-time.Minute))
	job := b.jobID(t, ev, "billing")

	q := queries.New(str)
	for i := 1; i <= 3; i++ {
		rows, err := q.ClaimJobs(ctx, queries.ClaimJobsParams{FullHandlers: []string{}, BatchSize: 10, LeaseHolder: "streamer-1", LeaseFor: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if len(rows) != 1 || rows[0].ID != job {
			t.Fatalf("claim %d: %d rows, want job %d", i, len(rows), job)
		}
		// The consumer took it and died in the handler: the lease runs out.
		b.exec(t, `UPDATE webhook_ingress.jobs SET lease_expires_at = now() - interval '1 second' WHERE id = $1`, job)
		reaped, err := q.ReapExpiredLeases(ctx, 100)
		if err != nil {
			t.Fatal(err)
		}
		if len(reaped) != 1 {
			t.Fatalf("reap %d: %d rows, want 1", i, len(reaped))
		}
	}
	if s := b.status(t, job); s != "dead_letter" {
		t.Fatalf("precondition: job %d is %s after 3 expired leases, want dead_letter", job, s)
	}
	var expired int
	if err := super.QueryRow(ctx, `SELECT count(*) FROM webhook_ingress.job_attempts WHERE job_id = $1 AND outcome = 'lease_expired'`, job).Scan(&expired); err != nil || expired != 3 {
		t.Fatalf("precondition: %d lease_expired attempts (%v), want 3", expired, err)
	}

	c := b.client(t)
	c.login()
	r := c.get("/dashboard/")
	if r.code != http.StatusOK {
		t.Fatalf("overview: %d\n%s", r.code, r.body)
	}
	var got []string
	for _, m := range handlerRE.FindAllStringSubmatch(r.body, -1) {
		if m[1] == "billing" {
			got = m[2:]
		}
	}
	if got == nil {
		t.Fatalf("no billing row on the overview:\n%s", r.body)
	}
	rate, attempts, failures := got[1], got[2], got[3]
	if attempts != "3" {
		t.Fatalf("precondition: billing's attempts in the last hour = %s, want 3", attempts)
	}
	if failures == "0" || rate == "0.0000" {
		t.Errorf("billing: every attempt of the last hour ran and never reported (its consumer died in the handler), the last "+
			"dead-lettered the job, yet the dashboard shows failure rate %s, %s failures of %s attempts: lease_expired attempts are "+
			"not counted as failures (DashboardHandlers)", rate, failures, attempts)
	}
}
