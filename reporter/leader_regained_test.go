package reporter_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/inlet-dev/inlet/internal/testwait"
	"github.com/inlet-dev/inlet/reporter"
)

// scriptedLeader is an election whose answer the test sets: leading or
// not, or an error (the election's connection lost, a reconnect refused).
type scriptedLeader struct {
	mu      sync.Mutex
	leading bool
	err     error
}

func (l *scriptedLeader) Leading(context.Context) (bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.leading, l.err
}

func (l *scriptedLeader) set(leading bool, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.leading, l.err = leading, err
}

// waitLog waits until the log holds want at least n times.
func waitLog(t *testing.T, logs *reviewBuf, want string, n int) {
	t.Helper()
	testwait.Eventually(t, 20*time.Second, fmt.Sprintf("%q logged %d times", want, n), func() (bool, string) {
		out := logs.String()
		return strings.Count(out, want) >= n, out
	})
}

// TestLeaderRegainedKeepsItsGaps (helper-336, with helper-334's review):
// a reporter that lost the lead (an election answered that another
// replica leads) and takes it again still looks for the gaps it knew,
// not only the 1,000 ids below the control plane's cursor, and the time
// it followed does not age them: attempt L, its id drawn before 1,500
// later attempts were reported and committed only after the reporter led
// again (following longer than GapTTL), is reported. Before, begin forgot
// the gaps (r.gaps = nil) and L, 1,500 ids below the cursor, was never
// sent.
func TestLeaderRegainedKeepsItsGaps(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d, cp := newDataPlane(t), newControlPlane(t)
	leader := &scriptedLeader{leading: true}
	var logs reviewBuf
	// GapTTL long beside the leading time (the bulk reported, a round after
	// the lead is taken again: seconds on a loaded CI run), shorter than the
	// time followed.
	const ttl = 10 * time.Second
	startReporter(t, d, cp, func(c *reporter.Config) {
		c.BatchSize, c.GapTTL, c.Leader = 500, ttl, leader
		c.Logger = textLogger(&logs)
	})

	slow := d.job(t)
	tx, err := d.super.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(ctx) })
	d.complete(t, tx, slow, 1)
	const many = 1500 // more than the 1,000 ids a start looks back
	if _, err := d.super.Exec(ctx, `INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, event_type, headers, raw_body, signature_verified)
		SELECT 'github', 'github', 'bulk-' || g, 'push', '{}', '\x00', true FROM generate_series(1, $1::int) g`, many); err != nil {
		t.Fatal(err)
	}
	if _, err := d.super.Exec(ctx, `UPDATE webhook_ingress.jobs j SET status = 'completed', attempt_count = 1,
		    attempted_at = now() - interval '25 milliseconds', completed_at = now(),
		    completed_attempt_id = nextval('webhook_ingress.job_attempts_id_seq'),
		    worker_id = 'worker-1', lease_holder_id = NULL, lease_expires_at = NULL, updated_at = now()
		FROM webhook_ingress.events e WHERE e.id = j.event_id AND e.external_event_id LIKE 'bulk-%'`); err != nil {
		t.Fatal(err)
	}
	cp.waitStored(t, many)

	// Another replica leads, longer than GapTTL; then this one again.
	leader.set(false, nil)
	waitLog(t, &logs, "no longer leads", 1)
	time.Sleep(ttl + time.Second)
	leader.set(true, nil)
	waitLog(t, &logs, "reporter took the lead again", 1)

	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	want := d.attemptIDs(t)
	testwait.Eventually(t, 20*time.Second, "the late attempt reported by the reporter that led again", func() (bool, string) {
		got := storedIDs(t, cp)
		return len(got) == len(want), fmt.Sprintf("the control plane holds %d of the data plane's %d attempts; log:\n%s", len(got), len(want), logs.String())
	})
}

// TestElectionErrorChangesNoOnesRole: an election that fails (an error,
// not an answer) leaves the reporter as it was. The leader keeps sending,
// counting the failure in failures_total{step="elect"}, and logs that it
// took the lead again when the election answers so; once an election
// answers that another replica leads it sends nothing, and a failed
// election does not make it send again.
func TestElectionErrorChangesNoOnesRole(t *testing.T) {
	t.Parallel()
	d, cp := newDataPlane(t), newControlPlane(t)
	leader := &scriptedLeader{leading: true}
	reg := prometheus.NewRegistry()
	var logs reviewBuf
	startReporter(t, d, cp, func(c *reporter.Config) {
		c.Leader, c.Metrics = leader, reg
		c.Logger = textLogger(&logs)
	})
	d.complete(t, d.super, d.job(t), 1)
	cp.waitStored(t, 1)

	blip := errors.New("leader election: connect to db: connection refused")
	leader.set(false, blip)
	waitLog(t, &logs, "leader election failed", 2)
	d.complete(t, d.super, d.job(t), 1)
	cp.waitStored(t, 2) // the leader kept sending
	if n := metricValue(t, reg, "inlet_reporter_failures_total", "elect"); n < 2 {
		t.Errorf("failures_total{step=elect} = %v after two failed elections", n)
	}
	leader.set(true, nil)
	waitLog(t, &logs, "took the lead again", 1)
	if out := logs.String(); strings.Contains(out, "no longer leads") || strings.Count(out, "reporter started") != 1 {
		t.Fatalf("the leader left its rounds on a failed election; its log:\n%s", out)
	}

	// Another replica leads; then the election fails: still a follower.
	leader.set(false, nil)
	waitLog(t, &logs, "no longer leads", 1)
	leader.set(false, blip)
	before := strings.Count(logs.String(), "leader election failed")
	waitLog(t, &logs, "leader election failed", before+2)
	d.complete(t, d.super, d.job(t), 1)
	testwait.Consistently(t, 500*time.Millisecond, "a follower whose election fails sends nothing", func() (bool, string) {
		n := len(storedIDs(t, cp))
		return n == 2, fmt.Sprintf("the control plane holds %d records, want 2", n)
	})
	leader.set(true, nil)
	cp.waitStored(t, 3)
}
