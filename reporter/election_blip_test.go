package reporter_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/internal/testwait"
	"github.com/inlet-dev/inlet/monitor"
	"github.com/inlet-dev/inlet/reporter"
)

// electionProxy is a TCP proxy to the data plane's PostgreSQL for one
// path (the election connection): while down it drops the connections
// open and refuses new ones (accepted and closed at once: a network blip,
// a restarting PgBouncer, max_connections reached), then lets them
// through again.
type electionProxy struct {
	ln     net.Listener
	net    string
	target string
	mu     sync.Mutex
	down   bool
	conns  []net.Conn
}

func newElectionProxy(t *testing.T, dsn string) (*electionProxy, *pgx.ConnConfig) {
	t.Helper()
	cc, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	p := &electionProxy{net: "tcp", target: net.JoinHostPort(cc.Host, strconv.Itoa(int(cc.Port)))}
	if strings.HasPrefix(cc.Host, "/") {
		p.net, p.target = "unix", fmt.Sprintf("%s/.s.PGSQL.%d", cc.Host, cc.Port)
	}
	if p.ln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			c, err := p.ln.Accept()
			if err != nil {
				return
			}
			p.mu.Lock()
			down := p.down
			p.mu.Unlock()
			if down {
				_ = c.Close()
				continue
			}
			s, err := net.Dial(p.net, p.target)
			if err != nil {
				_ = c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, s)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(s, c); _ = s.Close() }()
			go func() { _, _ = io.Copy(c, s); _ = c.Close() }()
		}
	}()
	t.Cleanup(func() { _ = p.ln.Close(); p.setDown(true) })
	addr := p.ln.Addr().(*net.TCPAddr)
	cc.Host, cc.Port, cc.Fallbacks = "127.0.0.1", uint16(addr.Port), nil
	return p, cc
}

// setDown cuts every open connection and refuses new ones (true), or lets
// them through again (false).
func (p *electionProxy) setDown(down bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = down
	if down {
		for _, c := range p.conns {
			_ = c.Close()
		}
		p.conns = nil
	}
}

// TestElectionBlipDoesNotLoseALateRecordOfTheOnlyReporter (review helper-334, fixed).
// Defect: since e5b7231 every `inlet streamer` with reporter.url runs its
// reporter under a monitor.Leader (cmd/inlet/reporter.go), also when it is
// the only streamer. A failed election (the election's own connection lost
// and its reconnect refused for a moment: a network blip, a database
// restart, max_connections) makes the running reporter leave its rounds
// (reporter/reporter.go Reporter.report returns when leads() is false),
// and the next successful election, although no other reporter led
// meanwhile, runs Reporter.begin, which forgets the gaps it was looking for
// (r.gaps = nil) and keeps only the 1,000 ids below the control plane's
// cursor. A late attempt (its id drawn in a transaction that commits after
// more than 1,000 later ones: a reaper pass, a replay of many dead
// letters) is then never reported, though docs/operations.md promises a
// running reporter picks it up "for 10 minutes ... however many attempts
// that transaction holds", and "an outage of any length does not shorten
// them". Before e5b7231 the same blip was a retried read, the gaps kept.
// The arrival log (restore detection) is reset the same way.
// Setup: real data plane and control plane (PostgreSQL, real HTTP); one
// reporter, elected as cmd/inlet elects it (monitor.NewNamedLeader on
// reporter.LockName), its election connection through a TCP proxy.
// Attempt L's id is drawn in an open transaction; 1,500 more attempts
// complete and are reported (L is a gap of the running reporter). The
// proxy drops the election connection and refuses new ones until the
// reporter logs "leader election failed", then lets them through; the
// reporter logs "took the lead again". L commits.
// Expected: L is stored by the control plane within 20 s (as it is without
// the blip: TestSecondStreamerDoesNotHideALostLateRecord's "L reported late
// by A"), the reporter never having stopped running.
// Observed before the fix: after 20 s the control plane holds 1,500 of the data plane's
// 1,501 attempts; L (id 1, 1,500 ids below the cursor) is never sent.
// Fixed by helper-336: an election error no longer ends a leader's rounds
// (Reporter.leads keeps it leading, warns, counts failures_total{step=
// "elect"} and asks again at most every Interval) until an election
// answers that another replica leads; the reporter logs "took the lead
// again" when its election answers again after the blip. And Reporter.begin,
// on taking the lead again after a clean loss, keeps the gaps it knew
// below its 1,000-id lookback (TestLeaderRegainedKeepsItsGaps).
func TestElectionBlipDoesNotLoseALateRecordOfTheOnlyReporter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d, cp := newDataPlane(t), newControlPlane(t)
	proxy, electionCfg := newElectionProxy(t, d.url)
	var logs reviewBuf
	startReporter(t, d, cp, func(c *reporter.Config) {
		c.BatchSize = 500
		c.Logger = textLogger(&logs)
		l := monitor.NewNamedLeader(electionCfg, reporter.LockName)
		t.Cleanup(l.Close) // after the reporter's Stop (registered later)
		c.Leader = l
	})

	// Attempt L: its id drawn in a transaction that commits late.
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

	// A blip on the election's path: its connection dropped, a reconnect
	// refused, then the path is back.
	proxy.setDown(true)
	testwait.Eventually(t, 20*time.Second, "the reporter's election failed", func() (bool, string) {
		return strings.Contains(logs.String(), "leader election failed"), logs.String()
	})
	proxy.setDown(false)
	testwait.Eventually(t, 20*time.Second, "the reporter leads again", func() (bool, string) {
		return strings.Contains(logs.String(), "took the lead again"), logs.String()
	})

	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	want := d.attemptIDs(t)
	var got []int64
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if got = storedIDs(t, cp); len(got) == len(want) {
			if out := logs.String(); strings.Count(out, "reporter started") != 1 || strings.Contains(out, "no longer leads") {
				t.Errorf("the reporter left its rounds on a failed election; its log:\n%s", out)
			}
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	var lateID int64
	if err := d.super.QueryRow(ctx, `SELECT completed_attempt_id FROM webhook_ingress.jobs WHERE id = $1`, slow).Scan(&lateID); err != nil {
		t.Fatal(err)
	}
	t.Fatalf("the only reporter, running throughout, lost the late attempt %d after one failed election: "+
		"after 20 s the control plane holds %d of the data plane's %d attempts (highest %d)",
		lateID, len(got), len(want), want[len(want)-1])
}

func textLogger(w io.Writer) *slog.Logger { return slog.New(slog.NewTextHandler(w, nil)) }
