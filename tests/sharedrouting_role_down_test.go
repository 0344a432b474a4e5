package tests

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/internal/testwait"
	"github.com/inlet-dev/inlet/streamer"
)

// TestRoleOutageSpendsNoAttempts proves that an outage of every consumer of
// one role of a routed handler spends none of that role's jobs' attempts
// while another role's consumers of the handler run on (docs/pipeline.md,
// guarantees 1 and 5: a lease whose consumer died is recovered; an outage of
// a handler's consumers does not count attempts).
//
// The handler "shared" is routed: team A (scope stripe) and team B (scope
// github) run the new version, no consumer of the previous one. Every
// consumer of A stops; B's keeps running. The streamer still publishes the
// stripe jobs on A's topic (A is the only role covering them), which nobody
// reads, and their leases expire. Before the fix ReapExpiredLeases judged
// liveness per handler: B's consumer, alive after each lease began, made
// every expiry a counted attempt, so with max_attempts 1 each stripe job was
// dead-lettered lease_expired at its first expiry, never run (this test
// failed so, 5 of 5). Now a consumer counts only when it could have received
// the job's reference (a role whose scope covers the job, an unrestricted
// one, or one of the previous version reading the handler's topic): the
// expiries while A is down are not counted, and A's consumer, back, runs
// every stripe job once.
func TestRoleOutageSpendsNoAttempts(t *testing.T) {
	rr := newReviewRouting(t)
	ctx := context.Background()
	a := rr.role(t, "a", "stripe")
	b := rr.role(t, "b", "github")
	svcA := rr.service(t, "team-a", rr.p.pool(t, a, 8), "team-a", "stripe") // max_attempts 1
	rr.service(t, "team-b", rr.p.pool(t, b, 8), "team-b", "github")
	lease := time.Second
	rr.p.startStreamer(t, streamer.Config{ID: "s1", LeaseDuration: lease, PollInterval: 50 * time.Millisecond,
		ReapInterval: 100 * time.Millisecond})
	testwait.Eventually(t, 20*time.Second, "the handler routed per role", func() (bool, string) {
		var roles int
		err := rr.p.admin.QueryRow(ctx, `SELECT count(DISTINCT db_role) FROM webhook_ingress.consumers
			WHERE handler = 'shared' AND db_role IS NOT NULL AND alive_until > now()`).Scan(&roles)
		return err == nil && roles == 2, fmt.Sprintf("%d roles alive (%v)", roles, err)
	})

	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := svcA.Stop(sctx); err != nil {
		t.Fatal(err)
	}
	var insertedAt time.Time
	if err := rr.p.admin.QueryRow(ctx, `SELECT now()`).Scan(&insertedAt); err != nil {
		t.Fatal(err)
	}
	rr.insert(t, "roledown", 5, "stripe", "github")

	// Wait until every stripe job has been leased again well after its first
	// lease could have expired and been reaped (each lease writes
	// attempted_at, kept by a reap or give-back): before the fix each was
	// dead-lettered by then. Any dead letter on the way fails at once.
	testwait.Eventually(t, 60*time.Second, "every stripe job leased again three leases after insert, none dead-lettered", func() (bool, string) {
		var dead, early int
		err := rr.p.admin.QueryRow(ctx, `SELECT count(*) FILTER (WHERE status = 'dead_letter'),
				count(*) FILTER (WHERE status <> 'dead_letter' AND (attempted_at IS NULL OR attempted_at < $1))
			FROM webhook_ingress.jobs WHERE handler = 'shared' AND provider = 'stripe'`,
			insertedAt.Add(3*lease)).Scan(&dead, &early)
		if err == nil && dead > 0 {
			t.Fatalf("%d stripe jobs dead-lettered while team A was down", dead)
		}
		return err == nil && early == 0, fmt.Sprintf("%d not leased again yet (%v)", early, err)
	})
	var counted, spent int
	if err := rr.p.admin.QueryRow(ctx, `SELECT
			(SELECT count(*) FROM webhook_ingress.job_attempts a JOIN webhook_ingress.jobs j ON j.id = a.job_id
			 WHERE j.handler = 'shared' AND j.provider = 'stripe'),
			(SELECT count(*) FROM webhook_ingress.jobs
			 WHERE handler = 'shared' AND provider = 'stripe' AND status = 'pending' AND attempt_count > 0)`).Scan(&counted, &spent); err != nil {
		t.Fatal(err)
	}
	if counted > 0 || spent > 0 {
		t.Fatalf("while team A was down: %d attempts of stripe jobs recorded, %d pending jobs with attempts spent; want none", counted, spent)
	}
	rr.mu.Lock()
	for id, who := range rr.ran {
		for _, w := range who {
			if w == "team-a:stripe" {
				t.Errorf("job %d run by team A while it was down", id)
			}
		}
	}
	rr.mu.Unlock()

	// Team A's consumer is back: it runs every stripe job, once.
	rr.service(t, "team-a", rr.p.pool(t, a, 8), "team-a", "stripe")
	rr.check(t, map[string]string{"stripe": "team-a", "github": "team-b"})
}

// TestJobNoRoleCoversStillEnds proves that judging an expiry by the roles
// that could have received the reference (TestRoleOutageSpendsNoAttempts)
// does not leave a job no role covers circling for ever: the streamer
// publishes such a job on the handler's own topic, which every consumer
// reads, so a live consumer of any role counts its expiry, and the job ends
// dead-lettered (lease_expired) as before. Here the handler is routed
// (team A stripe, team B github, both alive) and a subscription the
// operator left enabled gives it shopify jobs, which neither role may see.
// Without the reaper's "no role covers it" case these jobs were leased and
// given back uncounted for ever.
func TestJobNoRoleCoversStillEnds(t *testing.T) {
	rr := newReviewRouting(t)
	ctx := context.Background()
	a := rr.role(t, "a", "stripe")
	b := rr.role(t, "b", "github")
	rr.service(t, "team-a", rr.p.pool(t, a, 8), "team-a", "stripe")
	rr.service(t, "team-b", rr.p.pool(t, b, 8), "team-b", "github")
	if _, err := rr.p.admin.Exec(ctx, `INSERT INTO webhook_ingress.subscriptions (handler, provider_pattern, max_attempts)
		VALUES ('shared', 'shopify', 2)`); err != nil {
		t.Fatal(err)
	}
	rr.p.startStreamer(t, streamer.Config{ID: "s1", LeaseDuration: time.Second, PollInterval: 50 * time.Millisecond,
		ReapInterval: 100 * time.Millisecond})
	rr.insert(t, "uncovered", 3, "shopify")
	testwait.Eventually(t, 30*time.Second, "every shopify job dead-lettered lease_expired after its 2 attempts", func() (bool, string) {
		var ended, open int
		err := rr.p.admin.QueryRow(ctx, `SELECT
				count(*) FILTER (WHERE status = 'dead_letter' AND last_error_class = 'lease_expired' AND attempt_count = 2),
				count(*) FILTER (WHERE status <> 'dead_letter')
			FROM webhook_ingress.jobs WHERE handler = 'shared' AND provider = 'shopify'`).Scan(&ended, &open)
		return err == nil && ended == 3, fmt.Sprintf("%d ended, %d open (%v)", ended, open, err)
	})
}
