package reporter_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inlet-dev/inlet/internal/testwait"
	"github.com/inlet-dev/inlet/monitor"
	"github.com/inlet-dev/inlet/reporter"
)

// reporterGate is real HTTP in front of the control plane for one reporter:
// while shut, its requests wait unanswered until it opens again (a network
// partition of one streamer, or just the order two streamers' requests
// reach the control plane in). It counts the requests that reached it.
type reporterGate struct {
	url      string
	mu       sync.Mutex
	open     chan struct{}
	requests atomic.Int64 // every request that reached the gate
	inside   atomic.Int64 // requests past the gate, not yet answered
	answered atomic.Int64
}

func newReporterGate(t *testing.T, target string) *reporterGate {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	g := &reporterGate{open: make(chan struct{})}
	close(g.open)
	proxy := httputil.NewSingleHostReverseProxy(u)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.requests.Add(1)
		for {
			g.mu.Lock()
			open := g.open
			select {
			case <-open:
				g.inside.Add(1) // counted under the lock: shut waits for it
				g.mu.Unlock()
			default:
				g.mu.Unlock()
				select {
				case <-open:
					continue
				case <-r.Context().Done():
					return
				}
			}
			break
		}
		defer g.inside.Add(-1)
		proxy.ServeHTTP(w, r)
		g.answered.Add(1)
	}))
	t.Cleanup(hs.Close)
	g.url = hs.URL
	return g
}

// shut holds every later request, and waits until none is past the gate.
func (g *reporterGate) shut(t *testing.T) {
	t.Helper()
	g.mu.Lock()
	g.open = make(chan struct{})
	g.mu.Unlock()
	testwait.Eventually(t, 20*time.Second, "no request of the gated reporter in flight", func() (bool, string) {
		n := g.inside.Load()
		return n == 0, fmt.Sprintf("%d in flight", n)
	})
}

func (g *reporterGate) reopen() {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.open:
	default:
		close(g.open)
	}
}

// streamerLeader is the election of a streamer's reporter as cmd/inlet's
// startReporter makes it: a monitor.Leader over the lock reporter.LockName,
// on a connection made from the reporter pool's configuration, closed after
// the reporter stops (cleanups run last registered first: this one is
// registered before startReporter's Stop).
func streamerLeader(t *testing.T, pool *pgxpool.Pool) *monitor.Leader {
	t.Helper()
	l := monitor.NewNamedLeader(pool.Config().ConnConfig, reporter.LockName)
	t.Cleanup(l.Close)
	return l
}

// streamerReporter configures a reporter as a streamer's: against url (its
// gate), batches of 500, logging to logs, checking the control plane's
// cursor every 100 ms, elected by its own Leader on the shared lock. The
// Leader is stored in *leader when it is not nil.
func streamerReporter(t *testing.T, u string, logs *reviewBuf, leader **monitor.Leader) func(*reporter.Config) {
	return func(c *reporter.Config) {
		c.URL, c.BatchSize = u, 500
		c.Logger = slog.New(slog.NewTextHandler(logs, nil))
		reporter.SetCursorCheck(c, 100*time.Millisecond)
		l := streamerLeader(t, c.Pool)
		c.Leader = l
		if leader != nil {
			*leader = l
		}
	}
}

// following waits until the reporter logging to logs has found that
// another one leads.
func following(t *testing.T, logs *reviewBuf, who string) {
	t.Helper()
	testwait.Eventually(t, 20*time.Second, who+" found that another reporter leads", func() (bool, string) {
		out := logs.String()
		return strings.Contains(out, "another replica's reporter leads"), out
	})
}

// TestSecondStreamerDoesNotHideALostLateRecord (review helper-320, fixed).
// Defect: every `inlet streamer` with reporter.url runs its own metadata
// reporter (cmd/inlet/reporter.go startReporter, called by services.go for
// each streamer; no lock, unlike the silence reporter), all under the one
// tenant token, and several streamers are a supported deployment. The
// restore detection of f1b7ef6 compares the tenant-wide highest arrival
// number held (arrival_before, GET /api/v1/cursor "arrival", a max() over
// every sender's records) with the highest number this reporter was
// acknowledged (reporter/reporter.go Reporter.arrived, restore.go
// arrivalLog). After a restore the control plane's counter goes back with
// it and hands the lost numbers out again: once the other streamer's
// reporter has stored anything after the restore, the max is back at or
// above what the first reporter acknowledged, and it never notices. The
// other reporter does notice, but its arrival log cannot map numbers it was
// not given (they are "acknowledged before this reporter started"), so it
// only goes back to the cursor and its 1,000-id lookback. A late record
// (an attempt id more than 1,000 below the cursor when it committed: a
// long transaction, a reaper pass, a replay) that the restore lost is then
// lost for good, although the one reporter that sent it is running and, on
// its own, gets it back (the same scenario without the second streamer
// passes: the record is stored again within 2 s). CHANGELOG "Fixed" and
// docs/operations.md "Restoring the control plane's database" promise such
// a record is sent again by a running reporter. Root cause:
// reporter/reporter.go Reporter.arrived / send compare a per-reporter
// acknowledgement with a per-tenant maximum (controlplane/queries.sql
// InsertAttempts, Cursor) that other senders refill.
// Setup: real data plane and control plane (PostgreSQL, real HTTP).
// Streamer A's reporter runs; attempt L is drawn in an open transaction;
// 1,500 more attempts complete and are reported; the control plane's
// backup is taken (its records and its arrivals counter); L commits and A
// reports it late (number 1501). Streamer B starts (a rolling restart).
// While A's requests are held (reporterGate: only their order is forced),
// the control plane is restored to the backup (L deleted and the counter
// put back, in one transaction) and one attempt completes; then A's
// requests go through again. Both reporters run 15 s more (cursor checks
// every 100 ms).
// Since the fix both reporters are built as cmd/inlet builds them, each
// elected by its own monitor.Leader over the lock reporter.LockName (the
// test started two unelected Reporters before), and B, which does not
// lead, no longer reports the new attempt while A's requests are held (it
// sends nothing at all: its gate sees no request); A reports it once they
// go through.
// Expected: L is stored again, by A, which sent it and whose log maps its
// number; B sends nothing while A leads.
// Observed before the fix: L (attempt 1) was never sent again: the control
// plane held 1,501 of the data plane's 1,502 attempts after 15 s; B logged
// "acknowledged before this reporter started" and went back to its cursor
// (1501); A logged nothing (the max held, 1501, equals what it
// acknowledged).
// Fixed by electing one reporter per database: reporter.Config.Leader
// (cmd/inlet: monitor.NewNamedLeader on the reporter pool's configuration,
// lock reporter.LockName); a reporter that does not lead sends nothing,
// and one that takes the lead starts over from the control plane's cursor
// as at a start, so the only reporter's own numbers are the tenant's.
func TestSecondStreamerDoesNotHideALostLateRecord(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d, cp := newDataPlane(t), newControlPlane(t)
	var logsA, logsB reviewBuf
	ga := newReporterGate(t, cp.url)
	startReporter(t, d, cp, streamerReporter(t, ga.url, &logsA, nil))

	// Attempt L: its id drawn in a transaction that commits late.
	slow := d.job(t)
	tx, err := d.super.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(ctx) })
	d.complete(t, tx, slow, 1)
	const many = 1500 // more than the 1,000 ids a start or a rewind looks back
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
	// The control plane's backup: these records and its arrivals counter.
	var backupCounter int64
	if err := cp.pool.QueryRow(ctx, `SELECT last FROM control_plane.arrivals WHERE tenant = 'acme'`).Scan(&backupCounter); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	rows := cp.waitStored(t, many+1) // L reported late by A
	lateID, top := rows[0].attemptID, rows[len(rows)-1].attemptID
	if top-lateID <= 1000+100 {
		t.Fatalf("want the late attempt more than 1,100 ids below the cursor: %d, %d", lateID, top)
	}

	// Streamer B starts (a rolling restart): A leads, so B waits.
	gb := newReporterGate(t, cp.url)
	startReporter(t, d, cp, streamerReporter(t, gb.url, &logsB, nil))
	following(t, &logsB, "streamer B")

	// The control plane restored to the backup while A's next request
	// waits; the next attempt completes meanwhile.
	ga.shut(t)
	restore, err := cp.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := restore.Exec(ctx, `DELETE FROM control_plane.attempts WHERE tenant = 'acme' AND attempt_id = $1`, lateID); err != nil {
		t.Fatal(err)
	}
	if _, err := restore.Exec(ctx, `UPDATE control_plane.arrivals SET last = $1 WHERE tenant = 'acme'`, backupCounter); err != nil {
		t.Fatal(err)
	}
	if err := restore.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	d.complete(t, d.super, d.job(t), 1)
	// B does not report it: A leads. (Its rounds ask every 30 ms.)
	testwait.Consistently(t, 500*time.Millisecond, "streamer B sends nothing while A leads", func() (bool, string) {
		n := gb.requests.Load()
		return n == 0, fmt.Sprintf("%d requests of B", n)
	})
	ga.reopen()

	want := d.attemptIDs(t)
	var got []int64
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		got = storedIDs(t, cp)
		if slices.Equal(got, want) {
			if n := gb.requests.Load(); n != 0 {
				t.Fatalf("streamer B, which does not lead, sent %d requests to the control plane", n)
			}
			if !strings.Contains(logsA.String(), "highest arrival number is below") {
				t.Errorf("streamer A healed the restore without saying so; its log:\n%s", logsA.String())
			}
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("with a second streamer's reporter running, a restore of the control plane that lost the late record %d "+
		"(%d ids below the cursor) is never healed: after 15 s it holds %d of the data plane's %d attempts, %d missing "+
		"(streamer A, which sent it, warned of the loss: %v; streamer B: %v; requests of B: %d)",
		lateID, top-lateID, len(got), len(want), len(want)-len(got),
		strings.Contains(logsA.String(), "highest arrival number is below"),
		strings.Contains(logsB.String(), "highest arrival number is below"), gb.requests.Load())
}

// TestSecondStreamerTakesOverReportingWithoutLoss: of two streamers'
// reporters, elected as cmd/inlet elects them, the one that does not lead
// sends the control plane nothing (no cursor, no record) while the other
// leads; once the leader stops (its reporter stopped, its Leader closed,
// as a streamer's stop does), the other takes the lead within a bounded
// time and reports everything from the control plane's cursor on: the
// attempts completed while no reporter ran, and one whose transaction drew
// its id before the leader stopped and committed after the new leader had
// reported later ids (found by the start's lookback below the cursor).
// None is lost.
func TestSecondStreamerTakesOverReportingWithoutLoss(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d, cp := newDataPlane(t), newControlPlane(t)
	var logsA, logsB reviewBuf
	ga, gb := newReporterGate(t, cp.url), newReporterGate(t, cp.url)
	var leaderA *monitor.Leader
	a := startReporter(t, d, cp, streamerReporter(t, ga.url, &logsA, &leaderA))
	for range 5 {
		d.complete(t, d.super, d.job(t), 1)
	}
	cp.waitStored(t, 5)
	startReporter(t, d, cp, streamerReporter(t, gb.url, &logsB, nil))
	following(t, &logsB, "streamer B")

	for range 5 {
		d.complete(t, d.super, d.job(t), 1)
	}
	// An attempt whose id is drawn now, while A leads, and which commits
	// only after B has reported later ids.
	slow := d.job(t)
	tx, err := d.super.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(ctx) })
	d.complete(t, tx, slow, 1)
	cp.waitStored(t, 10)
	if n := gb.requests.Load(); n != 0 {
		t.Fatalf("while A leads, B sent %d requests to the control plane, want none", n)
	}
	if n := ga.requests.Load(); n == 0 {
		t.Fatal("A, the leader, sent nothing")
	}

	// A's streamer stops. Attempts complete before B has taken over.
	a.Stop()
	leaderA.Close()
	stopped := time.Now()
	for range 5 {
		d.complete(t, d.super, d.job(t), 1)
	}
	testwait.Eventually(t, 10*time.Second, "streamer B took over", func() (bool, string) {
		n := gb.requests.Load()
		return n > 0, fmt.Sprintf("%d requests of B", n)
	})
	t.Logf("B took over %v after A stopped", time.Since(stopped).Round(time.Millisecond))
	cp.waitStored(t, 15)
	for range 3 {
		d.complete(t, d.super, d.job(t), 1)
	}
	cp.waitStored(t, 18) // B's cursor is past the slow attempt's id now
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}

	want := d.attemptIDs(t)
	testwait.Eventually(t, 15*time.Second, "every attempt of the data plane held by the control plane", func() (bool, string) {
		got := storedIDs(t, cp)
		return slices.Equal(got, want), fmt.Sprintf("holds %v, data plane %v", got, want)
	})
	if out := logsB.String(); !strings.Contains(out, "reporter started") {
		t.Errorf("B, on taking the lead, did not start from the control plane's cursor; its log:\n%s", out)
	}
}
