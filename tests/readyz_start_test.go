package tests

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/internal/natstest"
	"github.com/inlet-dev/inlet/internal/pgtest"
	"github.com/inlet-dev/inlet/internal/testwait"
)

// TestConsumerReadyzBeforeItConsumes (review helper-253, fixed).
//
// Defect: docs/pipeline.md says `GET /readyz` of `inlet consumer` answers
// ready only when the database takes writes, it is connected to NATS "and
// every handler's subscription consuming". inlet consumer starts its health
// listener before the service starts (cmd/inlet/services.go runConsumer:
// health.Start, then svc.Start), and consumers.Service.Healthy
// (consumers/service.go) says nothing of whether Start ran: it reports only
// a subscription the bus closed and the transport's own faults. So while
// Start has not subscribed anything (its registration waits on a lock, a
// JetStream consumer is slow to create), /readyz answers 200: a rolling
// update (deployments/kubernetes/consumer-deployment.yaml, maxUnavailable 0)
// takes the new pod as ready and stops the old one although the new one
// consumes nothing, and if its Start then fails the handler has no
// consumer at all.
//
// Setup: real PostgreSQL and NATS; a transaction holds
// webhook_ingress.subscriptions in SHARE ROW EXCLUSIVE mode (as an
// operator's open transaction, or a migration, would), so the consumer's
// registration (UpsertSubscription, the first step of Start) waits; once
// pg_stat_activity shows it waiting on that lock, /readyz is asked.
//
// Expected: 503 while no subscription exists ("consumers started" not yet
// logged).
//
// Observed: 200 while the registration waits on the lock, nothing is
// subscribed and "consumers started" is not logged (run: health listener
// up at 29.907, probe 200, lock released, "consumers started" at 29.960).
//
// Fixed: consumers.Service.Healthy reports "starting: subscribing
// handlers" until Start has returned nil and "stopping" once Stop has begun
// (a phase Start and Stop set, read without the lock Start holds); inlet
// streamer's ready func is gated on str.Start's return, and
// streamer.Streamer.Healthy reports "stopping" once Stop has begun.
func TestConsumerReadyzBeforeItConsumes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	nats := natstest.Start(t)
	dbURL := pgtest.NewDatabase(t)
	cfg, _ := servicesConfig(t, nats.URL(), "http://127.0.0.1:9/", "readyz-start-forward-secret-01")

	// Hold the subscriptions table against writes, as an open
	// transaction of an operator or a migration does.
	locker, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	tx, err := locker.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `LOCK TABLE webhook_ingress.subscriptions IN SHARE ROW EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	released := false
	release := func() {
		if !released {
			released = true
			_ = tx.Rollback(ctx)
		}
	}
	t.Cleanup(func() { release(); _ = locker.Close(ctx) })

	env := cleanEnv("DATABASE_URL=" + dbURL)
	c := start(t, env, "consumer", "--config", cfg)
	addr := healthAddr(t, c)

	// The consumer's registration is waiting on the lock: Start has not
	// subscribed anything.
	watch, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = watch.Close(ctx) })
	testwait.Eventually(t, 60*time.Second, "the consumer's registration waiting on the subscriptions lock", func() (bool, string) {
		var n int
		err := watch.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE application_name = 'inlet-consumer' AND wait_event_type = 'Lock' AND query ILIKE '%subscriptions%'`).Scan(&n)
		return err == nil && n > 0, "none yet"
	})
	if strings.Contains(c.errOut(), "consumers started") {
		t.Fatalf("precondition: the consumer started although its registration waits:\n%s", c.errOut())
	}

	resp, err := http.Get("http://" + addr + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	started := strings.Contains(c.errOut(), "consumers started")
	if resp.StatusCode == http.StatusOK && !started {
		t.Errorf("inlet consumer's /readyz answered %d while its Start waits in registration and no handler's subscription exists "+
			"(docs/pipeline.md: ready only with \"every handler's subscription consuming\"); want 503", resp.StatusCode)
	}

	// Let it start, so that it stops cleanly.
	release()
	c.waitLog("consumers started", 60*time.Second)
}
