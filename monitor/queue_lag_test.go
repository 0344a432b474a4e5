package monitor_test

// Review: inlet_handler_lag_seconds is computed as now() − min(next_attempt_at)
// over due jobs (schema/queries/monitor.sql MonitorLag, read by
// monitor/queue.go Queue.read). The reaper (schema/queries/jobs.sql
// ReapExpiredLeases, both its "ran" and its "idle" branch) sets
// next_attempt_at = now() when it puts an expired lease back to pending.
// The streamer leases due jobs whether or not any consumer is alive, so
// while every consumer of a handler is down, each of its jobs goes
// pending → leased (streamer.lease_duration, 60s) → reaped (lag reset to 0)
// → leased again: the gauge stays under about a minute for hours while
// nothing is delivered. The one metric docs/operations.md tells operators
// to alert on ("inlet_handler_lag_seconds … age of the handler's oldest due
// job") cannot fire during a total consumer outage.
//

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/inlet-dev/inlet/monitor"
	"github.com/inlet-dev/inlet/schema/queries"
)

// Regression test (review helper-101; fixed: the text describes the behaviour
// before the fix). a job that has waited 2 hours for a consumer of its handler, and
// was leased once by the streamer while no consumer was alive (its lease
// expired, the reaper gave it back without counting the attempt), shows a
// lag of ~0s instead of ~2h.
//
// Expected: inlet_handler_lag_seconds{handler="billing"} stays ≥ 2h: the
// job is still due and still undelivered since 2 hours.
func TestHandlerLagOutlivesTheReaperDuringAConsumerOutage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	super, streamer, reg := jobDueTwoHours(t)

	// The streamer leases it (as its claim does) and publishes it; no
	// consumer of billing is alive, the lease runs out.
	exec(t, super, `UPDATE webhook_ingress.jobs SET status = 'leased', lease_holder_id = 'streamer-1',
		attempted_at = now() - interval '61 seconds', lease_expires_at = now() - interval '1 second',
		attempt_count = attempt_count + 1 WHERE handler = 'billing'`)
	// The reaper (as webhook_streamer, the real statement) gives it back.
	reaped, err := queries.New(streamer).ReapExpiredLeases(ctx, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(reaped) != 1 || reaped[0].Status != "pending" {
		t.Fatalf("precondition: reaped %+v, want the one job back to pending", reaped)
	}
	var delivered bool
	if err := super.QueryRow(ctx, `SELECT status = 'completed' FROM webhook_ingress.jobs WHERE handler = 'billing'`).Scan(&delivered); err != nil || delivered {
		t.Fatalf("precondition: delivered %v, %v", delivered, err)
	}

	if l := handlerLag(t, reg, "billing"); l < 7190 {
		t.Errorf("inlet_handler_lag_seconds{handler=billing} = %.1fs after one expired lease; the job is still undelivered "+
			"2h after its event arrived, want ≥ 7200s (the reaper's next_attempt_at = now() reset it)", l)
	}
}

// jobDueTwoHours starts a database with one job of handler billing, due
// since its event arrived two hours ago, and the queue gauges on it (whose
// lag it checks first): the lag tests' start.
func jobDueTwoHours(t *testing.T) (super, streamer *pgxpool.Pool, reg *prometheus.Registry) {
	t.Helper()
	super, streamer = pools(t)
	exec(t, super, `INSERT INTO webhook_ingress.subscriptions (handler) VALUES ('billing')`)
	exec(t, super, `INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, raw_body, signature_verified, received_at)
		VALUES ('stripe', 'stripe', 'evt_1', '{}', true, now() - interval '2 hours')`)
	exec(t, super, `UPDATE webhook_ingress.jobs SET created_at = now() - interval '2 hours', next_attempt_at = now() - interval '2 hours' WHERE handler = 'billing'`)
	reg = prometheus.NewRegistry()
	reg.MustRegister(monitor.NewQueue(streamer, nil))
	if l := handlerLag(t, reg, "billing"); l < 7190 {
		t.Fatalf("precondition: lag of a job due for 2h = %vs, want about 7200s", l)
	}
	return super, streamer, reg
}

// handlerLag is inlet_handler_lag_seconds{handler} as reg exports it.
func handlerLag(t *testing.T, reg *prometheus.Registry, handler string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "inlet_handler_lag_seconds" {
			for _, m := range mf.GetMetric() {
				if m.GetLabel()[0].GetValue() == handler {
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	t.Fatalf("no inlet_handler_lag_seconds{handler=%q}", handler)
	return 0
}
