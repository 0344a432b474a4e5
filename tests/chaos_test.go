package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/ingress/verify"
	"github.com/inlet-dev/inlet/internal/natstest"
	"github.com/inlet-dev/inlet/internal/pgcluster"
	"github.com/inlet-dev/inlet/internal/pgtest"
	"github.com/inlet-dev/inlet/internal/testwait"
	"github.com/inlet-dev/inlet/schema"
)

// The chaos runs: signed webhooks sent as a provider sends them (each retried
// until acknowledged) through separate ingress, streamer and consumer
// processes over NATS while faults are injected, then a table of what was
// sent, acknowledged, stored and delivered. Any acknowledged webhook missing
// or any job left unfinished fails the run.
//
// TestChaosNothingAcknowledgedIsLost runs in CI. The others take minutes
// each, or need root (a tmpfs for the full disk); they run with
// INLET_CHAOS=1, which `go tool task chaos` sets (run it before a release).
// INLET_CHAOS_N and INLET_CHAOS_RATE set the webhooks per run and the
// offered rate (0: as fast as eight senders go). Sending goes on until every
// listed fault is over, so each one meets traffic whatever the count. In CI
// the first run offers 100/s: unthrottled, its eight senders kept both cores
// busy for the whole fault schedule (~80 s of CPU, 6,800 webhooks) and slowed
// every test beside it; at 100/s each fault still meets traffic (~2,500
// webhooks, 63 s of CPU).

// service is a restartable inlet process.
type service struct {
	name string
	args []string
	env  []string
	mu   sync.Mutex
	p    *proc
}

func (s *service) start(t *testing.T) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.p = start(t, s.env, s.args...)
}

func (s *service) kill(t *testing.T) {
	s.mu.Lock()
	p := s.p
	s.mu.Unlock()
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// chaosFault is one injected fault; it returns once the fault is over (the
// broken thing restarted or resumed).
type chaosFault struct {
	name string
	do   func(t *testing.T) error
}

// chaosRun describes one run.
type chaosRun struct {
	scenario string
	// dbURL is what the services connect to; checkURL what the final count
	// reads (the primary at the end).
	dbURL    string
	checkURL func() string
	nats     *natstest.Server
	// natsStorage is bus.storage: file or memory.
	natsStorage string
	// wake is streamer.wake.
	wake string
	// faults run in order, one every 2-3 s from the start of sending; with
	// killServices, a random service is SIGKILLed and restarted at every
	// other round until sending ends.
	faults       []chaosFault
	killServices bool
	// total is how many webhooks are sent at least: more when the faults
	// last longer (see faults).
	total, rate int
	// expectLogs must each appear in some service's output: the run took
	// the recovery path it is meant to prove.
	expectLogs []string
	// handlers subscribe besides "effect", each to every event: every
	// event then makes 1 + len(handlers) jobs, each of which must reach the
	// target.
	handlers []chaosHandler
	// check, when set, runs after the counts with the target's calls.
	check func(t *testing.T, conn *pgx.Conn, target *countingTarget)
	// target receives the handlers' calls (signed with
	// chaosForwardSecret); nil: a new one.
	target *countingTarget
	// targetURL is target's URL.
	targetURL string
	// replay, when set, is an operator's inlet replay command (its
	// arguments after "replay"), run every replayEvery while webhooks are
	// sent; a run that fails (the database down) is logged and retried at
	// the next turn.
	replay      []string
	replayEvery time.Duration
}

// chaosForwardSecret signs the handlers' calls to the target.
const chaosForwardSecret = "chaos-forward-secret-0123"

// chaosHandler is an http-forward handler that posts to the target's
// /name; settings are its further YAML keys (rate_limit, order_key, …).
type chaosHandler struct {
	name     string
	settings []string
}

// chaosReport is what a run saw.
type chaosReport struct {
	scenario                                                              string
	sent, acked, httpAttempts, stored, ackedMissing                       int
	jobs, delivered, duplicates, stuck, deadLetters, killed, badSignature int
	faults                                                                []string
	// answers counts the ingress's non-200 answers by status ("error": no
	// answer at all).
	answers map[string]int
}

func (r chaosReport) table() string {
	var b strings.Builder
	fmt.Fprintf(&b, "\nchaos %s (faults: %s)\n", r.scenario, strings.Join(r.faults, ", "))
	fmt.Fprintf(&b, "  %-10s %-7s %-7s %-7s %-19s %-9s %-10s %-5s %-12s %-7s\n",
		"sent", "acked", "tries", "stored", "acked-but-missing", "delivered", "duplicates", "stuck", "dead-letters", "killed")
	fmt.Fprintf(&b, "  %-10d %-7d %-7d %-7d %-19d %-9d %-10d %-5d %-12d %-7d\n",
		r.sent, r.acked, r.httpAttempts, r.stored, r.ackedMissing, r.delivered, r.duplicates, r.stuck, r.deadLetters, r.killed)
	fmt.Fprintf(&b, "  answers other than 200 (retried by the sender): %v\n", r.answers)
	return b.String()
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v >= 0 {
		return v
	}
	return def
}

// chaosOr is long under INLET_CHAOS, short otherwise (in CI).
func chaosOr(long, short int) int {
	if os.Getenv("INLET_CHAOS") != "" {
		return long
	}
	return short
}

func needChaos(t *testing.T) {
	if os.Getenv("INLET_CHAOS") == "" {
		t.Skip("a long fault run: go tool task chaos (INLET_CHAOS=1)")
	}
}

// chaosCluster starts a throwaway PostgreSQL for one run under dir, migrated.
func chaosCluster(t *testing.T, dir string, settings map[string]string, env ...string) *pgcluster.Cluster {
	t.Helper()
	ctx := context.Background()
	all := map[string]string{"max_connections": "200", "wal_level": "logical"}
	for k, v := range settings {
		all[k] = v
	}
	cluster, err := pgcluster.New(ctx, pgcluster.Config{Dir: dir, Install: true, Settings: all, Env: env})
	if err != nil {
		t.Fatal(err)
	}
	if err := cluster.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cluster.Thaw(); _ = cluster.Stop() })
	conn, err := pgx.Connect(ctx, cluster.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := schema.Migrate(ctx, conn); err != nil {
		t.Fatal(err)
	}
	return cluster
}

// postgresFaults are the faults on one server: a crash, an immediate stop
// and an 8 s freeze, each followed by recovery.
func postgresFaults(cluster *pgcluster.Cluster) []chaosFault {
	ctx := context.Background()
	return []chaosFault{
		{"postgres SIGKILL", func(*testing.T) error {
			_ = cluster.Kill()
			time.Sleep(time.Second) // the outage: down for a second
			return cluster.Start(ctx)
		}},
		{"postgres stop -m immediate", func(*testing.T) error {
			_ = cluster.StopImmediate()
			time.Sleep(time.Second) // the outage: down for a second
			return cluster.Start(ctx)
		}},
		{"postgres frozen 8s", func(*testing.T) error {
			if err := cluster.Freeze(); err != nil {
				return err
			}
			time.Sleep(8 * time.Second) // the outage: frozen for 8 s
			return cluster.Thaw()
		}},
	}
}

// firstRunFaults are TestChaosNothingAcknowledgedIsLost's: Postgres
// crashed, NATS crashed, Postgres stopped immediately and frozen.
func firstRunFaults(cluster *pgcluster.Cluster, nats *natstest.Server) []chaosFault {
	faults := postgresFaults(cluster)
	return append(faults[:1], append([]chaosFault{natsFault(nats)}, faults[1:]...)...)
}

// natsFault kills NATS and starts it again.
func natsFault(nats *natstest.Server) chaosFault {
	return chaosFault{"NATS SIGKILL", func(*testing.T) error {
		nats.Kill()
		time.Sleep(time.Second) // the outage: down for a second
		return nats.Restart()
	}}
}

// Signed webhooks while processes are SIGKILLed and restarted every few
// seconds, Postgres crashes, stops immediately and freezes for 8 s, and NATS
// crashes: every acknowledged webhook is stored exactly once, every job
// completes, no handler effect is lost. Two streamers and three consumer
// replicas share the work. In CI, sending lasts as long as the faults do (a
// few thousand webhooks); `go tool task chaos` sends 10,000 (INLET_CHAOS_N),
// and keeps killing services for as long.
func TestChaosNothingAcknowledgedIsLost(t *testing.T) {
	t.Parallel()
	cluster := chaosCluster(t, filepath.Join(pgtest.TempDir(t), "pg"), nil)
	nats := natstest.Start(t)
	faults := firstRunFaults(cluster, nats)
	runChaos(t, chaosRun{scenario: "processes, postgres, nats", dbURL: cluster.URL("postgres"),
		checkURL: func() string { return cluster.URL("postgres") }, nats: nats, faults: faults, killServices: true,
		total: envInt("INLET_CHAOS_N", chaosOr(10000, 1000)), rate: envInt("INLET_CHAOS_RATE", chaosOr(0, 100))})
}

// NATS killed and restarted every few seconds, with the stream on disk and
// in memory (a restart then loses every reference in it: the streamer must
// recreate the stream, the consumers their durable, and lease expiry must
// bring the lost references back).
func TestChaosNATSRestarts(t *testing.T) {
	needChaos(t)
	for _, storage := range []string{"file", "memory"} {
		t.Run(storage, func(t *testing.T) {
			cluster := chaosCluster(t, filepath.Join(pgtest.TempDir(t), "pg"), nil)
			nats := natstest.Start(t)
			var expect []string
			if storage == "memory" {
				expect = []string{"JetStream lost the stream"}
			}
			var faults []chaosFault
			for range 4 {
				faults = append(faults, natsFault(nats))
			}
			runChaos(t, chaosRun{scenario: "nats restarts, " + storage + " storage", dbURL: cluster.URL("postgres"),
				checkURL: func() string { return cluster.URL("postgres") }, nats: nats, natsStorage: storage, faults: faults,
				total: envInt("INLET_CHAOS_N", 5000), rate: envInt("INLET_CHAOS_RATE", 250), expectLogs: expect})
		})
	}
}

// A synchronous streaming standby is promoted while traffic flows and the
// primary is gone for good. The services reach the new primary through a
// two-host URL (target_session_attrs=read-write); the streamer's
// replication slot does not exist there, so it falls back to NOTIFY and
// polling, says so, and makes a new slot. With synchronous_commit on and the
// standby synchronous, nothing acknowledged is lost.
func TestChaosStandbyPromoted(t *testing.T) {
	needChaos(t)
	ctx := context.Background()
	dir := pgtest.TempDir(t)
	settings := map[string]string{"max_wal_senders": "10", "max_replication_slots": "10"}
	primary := chaosCluster(t, filepath.Join(dir, "primary"), settings)
	standby, err := primary.NewStandby(ctx, filepath.Join(dir, "standby"),
		map[string]string{"max_connections": "200", "wal_level": "logical", "max_wal_senders": "10", "max_replication_slots": "10"})
	if err != nil {
		t.Fatal(err)
	}
	if err := standby.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = standby.Stop() })
	// Synchronous from here on: a commit waits for the standby's flush, so
	// an acknowledged webhook is on both servers. The standby by name (its
	// walreceiver's default application_name), never '*', which the
	// streamer's replication stream matches too: PostgreSQL could then wait
	// on the stream, which stores nothing (review helper-315; the streamer
	// refuses to stream under it).
	func() {
		conn, err := pgx.Connect(ctx, primary.URL("postgres"))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, `ALTER SYSTEM SET synchronous_standby_names = 'FIRST 1 (walreceiver)'`); err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Exec(ctx, `SELECT pg_reload_conf()`); err != nil {
			t.Fatal(err)
		}
		testwait.Eventually(t, 30*time.Second, "the standby a synchronous standby", func() (bool, string) {
			var state string
			err := conn.QueryRow(ctx, `SELECT coalesce(max(sync_state), '') FROM pg_stat_replication`).Scan(&state)
			return err == nil && state == "sync", fmt.Sprintf("sync_state %q (%v)", state, err)
		})
	}()
	nats := natstest.Start(t)
	url := fmt.Sprintf("postgres://postgres@127.0.0.1:%d,127.0.0.1:%d/postgres?sslmode=disable&target_session_attrs=read-write",
		primary.Port(), standby.Port())
	promote := chaosFault{"primary SIGKILL, standby promoted", func(*testing.T) error {
		_ = primary.Kill()
		return standby.Promote(ctx)
	}}
	runChaos(t, chaosRun{scenario: "standby promoted", dbURL: url, wake: "replication",
		checkURL: func() string { return standby.URL("postgres") }, nats: nats,
		faults: []chaosFault{{"none", func(*testing.T) error { return nil }}, promote},
		total:  envInt("INLET_CHAOS_N", 5000), rate: envInt("INLET_CHAOS_RATE", 250),
		expectLogs: []string{"replication slot was missing on this server"}})
}

// The disk under PostgreSQL fills up while traffic flows: ingress answers
// 503 (nothing is acknowledged that is not stored), and once space returns
// everything recovers. Needs root to mount a small tmpfs.
func TestChaosDiskFull(t *testing.T) {
	needChaos(t)
	if os.Geteuid() != 0 {
		t.Skip("mounting a small tmpfs for the data directory needs root")
	}
	ctx := context.Background()
	mnt := filepath.Join(pgtest.TempDir(t), "disk")
	if err := os.MkdirAll(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", mnt, "tmpfs", 0, "size=512m,mode=0755"); err != nil {
		t.Skipf("mount a tmpfs at %s: %v", mnt, err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(mnt, syscall.MNT_DETACH) })
	cluster := chaosCluster(t, filepath.Join(mnt, "pg"), map[string]string{"max_wal_size": "96MB", "min_wal_size": "32MB"})
	nats := natstest.Start(t)
	filler := filepath.Join(mnt, "filler")
	fill := chaosFault{"disk full for 10s", func(t *testing.T) error {
		f, err := os.Create(filler)
		if err != nil {
			return err
		}
		chunk := make([]byte, 1<<20)
		for {
			if _, err := f.Write(chunk); err != nil {
				break // ENOSPC: the disk is full
			}
		}
		f.Close()
		t.Log("chaos: disk full")
		time.Sleep(10 * time.Second) // the outage: full for 10 s
		if err := os.Remove(filler); err != nil {
			return err
		}
		t.Log("chaos: space back")
		// A PANIC on a WAL write restarts the server by itself; if the
		// postmaster gave up, start it as a supervisor would.
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			if conn, err := pgx.Connect(ctx, cluster.URL("postgres")); err == nil {
				conn.Close(ctx)
				return nil
			}
			time.Sleep(500 * time.Millisecond) // polling with a fallback, not a wait that fails
		}
		_ = cluster.StopImmediate()
		return cluster.Start(ctx)
	}}
	runChaos(t, chaosRun{scenario: "disk full", dbURL: cluster.URL("postgres"),
		checkURL: func() string { return cluster.URL("postgres") }, nats: nats,
		faults: []chaosFault{{"none", func(*testing.T) error { return nil }}, fill},
		total:  envInt("INLET_CHAOS_N", 5000), rate: envInt("INLET_CHAOS_RATE", 250)})
}

// The database's clock 10 minutes ahead of and behind every service's
// (PostgreSQL under libfaketime): for each consumer, its own wall clock 10
// minutes off the database's. Leases, fencing, retries and durations use the
// database's clock or the process's monotonic one, so nothing changes:
// nothing lost, nothing stuck, no more duplicates than a restart makes. (A Go
// binary reads the clock without libc, so libfaketime cannot skew a consumer
// alone; skewing the one server they all share is the same offset.)
func TestChaosClockSkew(t *testing.T) {
	needChaos(t)
	lib := faketimeLibrary(t)
	for _, offset := range []string{"+10m", "-10m"} {
		t.Run(offset, func(t *testing.T) {
			cluster := chaosCluster(t, filepath.Join(pgtest.TempDir(t), "pg"), nil,
				"LD_PRELOAD="+lib, "FAKETIME="+offset, "DONT_FAKE_MONOTONIC=1")
			ctx := context.Background()
			conn, err := pgx.Connect(ctx, cluster.URL("postgres"))
			if err != nil {
				t.Fatal(err)
			}
			var skew float64
			err = conn.QueryRow(ctx, `SELECT extract(epoch FROM clock_timestamp() - $1::timestamptz)`, time.Now()).Scan(&skew)
			conn.Close(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if want, _ := time.ParseDuration(offset); skew < want.Seconds()-30 || skew > want.Seconds()+30 {
				t.Fatalf("the database's clock is %.0fs off this process's, want %s: libfaketime did not take", skew, offset)
			}
			nats := natstest.Start(t)
			runChaos(t, chaosRun{scenario: "database clock " + offset + " off every service's", dbURL: cluster.URL("postgres"),
				checkURL: func() string { return cluster.URL("postgres") }, nats: nats, killServices: true,
				faults: []chaosFault{{"none", func(*testing.T) error { return nil }}},
				total:  envInt("INLET_CHAOS_N", 5000), rate: envInt("INLET_CHAOS_RATE", 250)})
		})
	}
}

// Handlers with limits and per-entity order meet the same faults as the
// first run (services SIGKILLed throughout, Postgres crashed, stopped and
// frozen, NATS crashed): "limited" is leased through its token bucket,
// in-flight limit and circuit breaker (the claim's limited arm), "ordered"
// through its order lanes. Every job of every handler completes and reaches
// the target, and the ordered handler's calls for each entity come in the
// order its events were sent (each entity's events are sent one after the
// other, so that is their order of arrival): no event is first called
// before an earlier one of its entity (a repeat may come late, see
// checkEntityOrder). Between the faults, the limited handler's target fails
// until its circuit opens; the circuit closes again and every job completes.
// Through all of it, "limited" is never leased faster than its token bucket
// allows (checkRateLimit), services killed and Postgres crashed included.
func TestChaosLimitedAndOrderedHandlers(t *testing.T) {
	// The limited handler's token bucket, configured and then checked.
	const limitedRate, limitedBurst = 200, 20
	needChaos(t)
	cluster := chaosCluster(t, filepath.Join(pgtest.TempDir(t), "pg"), nil)
	nats := natstest.Start(t)
	target, targetURL := newCountingTarget(t, chaosForwardSecret)
	// Between the NATS and the Postgres faults, the limited handler's
	// target answers 500 until its circuit opens (20 failures in a row),
	// then recovers: probes close the circuit again.
	faults := firstRunFaults(cluster, nats)
	breaker := chaosFault{"limited handler's target failing until its circuit opens", func(t *testing.T) error {
		target.setFailing("/limited", true)
		defer target.setFailing("/limited", false)
		return waitCircuitOpen(cluster.URL("postgres"), "limited", 60*time.Second)
	}}
	faults = append(faults[:2], append([]chaosFault{breaker}, faults[2:]...)...)
	runChaos(t, chaosRun{scenario: "limited and ordered handlers", dbURL: cluster.URL("postgres"),
		checkURL: func() string { return cluster.URL("postgres") }, nats: nats, faults: faults, killServices: true,
		target: target, targetURL: targetURL,
		total: envInt("INLET_CHAOS_N", 5000), rate: envInt("INLET_CHAOS_RATE", 250),
		handlers: []chaosHandler{
			{"limited", []string{fmt.Sprintf("rate_limit: %d", limitedRate), fmt.Sprintf("burst: %d", limitedBurst),
				"max_in_flight: 8", "breaker_failures: 20", "breaker_probe_interval: 1s"}},
			{"ordered", []string{"order_key: entity"}},
		},
		check: func(t *testing.T, conn *pgx.Conn, target *countingTarget) {
			var circuit string
			var keyed, unkeyed int
			err := conn.QueryRow(context.Background(), `SELECT
				(SELECT circuit FROM webhook_ingress.handler_limits WHERE handler = 'limited'),
				count(*) FILTER (WHERE order_key IS NOT NULL), count(*) FILTER (WHERE order_key IS NULL)
				FROM webhook_ingress.jobs WHERE handler = 'ordered'`).Scan(&circuit, &keyed, &unkeyed)
			if err != nil {
				t.Fatal(err)
			}
			if circuit != "closed" || keyed == 0 || unkeyed != 0 {
				t.Errorf("limited's circuit %q at the end (want closed); ordered jobs with a key %d, without %d (want all keyed)", circuit, keyed, unkeyed)
			}
			target.mu.Lock()
			t.Logf("limited handler: %d calls answered 500 while its target was failing", target.failed)
			target.mu.Unlock()
			target.mu.Lock()
			calls := target.calls["/ordered"]
			target.mu.Unlock()
			checkEntityOrder(t, calls)
			checkRateLimit(t, conn, "limited", limitedRate, limitedBurst)
		}})
}

// checkRateLimit fails when handler's leases, at the times the claims
// stamped them (attempted_at, the clock its token bucket runs on), ever
// outran the bucket: in any span [a, b] between two leases, at most
// burst + rate·(b − a) of them. Every lease the database remembers counts:
// the job's last one and each earlier attempt's in job_attempts (a lease
// given back untaken leaves no trace, so this can only undercount).
func checkRateLimit(t *testing.T, conn *pgx.Conn, handler string, rate float64, burst int) {
	t.Helper()
	rows, err := conn.Query(context.Background(), `
		SELECT at FROM (
			SELECT j.id, j.attempt_count AS attempt, j.attempted_at AS at
			FROM webhook_ingress.jobs j
			WHERE j.handler = $1 AND j.attempted_at IS NOT NULL
			UNION
			SELECT a.job_id, a.attempt, a.started_at
			FROM webhook_ingress.job_attempts a
			JOIN webhook_ingress.jobs j ON j.id = a.job_id AND j.event_received_at = a.event_received_at
			WHERE j.handler = $1
		) leases ORDER BY at`, handler)
	if err != nil {
		t.Fatal(err)
	}
	at, err := pgx.CollectRows(rows, pgx.RowTo[time.Time])
	if err != nil {
		t.Fatal(err)
	}
	if len(at) < 2*burst {
		t.Fatalf("%s: %d leases, too few to test its rate limit", handler, len(at))
	}
	// The busiest span: the most leases over what the bucket allows.
	worst, worstI, worstJ := -1.0, 0, 0
	for i := range at {
		for j := i; j < len(at); j++ {
			allowed := float64(burst) + rate*at[j].Sub(at[i]).Seconds()
			if excess := float64(j-i+1) - allowed; excess > worst {
				worst, worstI, worstJ = excess, i, j
			}
		}
	}
	span := at[worstJ].Sub(at[worstI])
	msg := fmt.Sprintf("%s: %d leases over %s; the busiest span held %d leases in %s, where rate %g/s and burst %d allow %.1f",
		handler, len(at), at[len(at)-1].Sub(at[0]).Round(time.Millisecond), worstJ-worstI+1, span,
		rate, burst, float64(burst)+rate*span.Seconds())
	if worst > 1e-6 {
		t.Error(msg)
		return
	}
	t.Log(msg)
}

// An operator replays every job of the last 5 s to the handler every 2 s
// while the first run's faults go on (services SIGKILLed throughout,
// Postgres crashed, stopped and frozen, NATS crashed). Every job ends
// completed, none is stuck, each replayed job's handler was called after its
// last replay (no replay is swallowed by a fault or by an outcome from before
// it), and no replay fails but for the database being down (a deadlock
// against the completions did, before replays locked in id order).
//
// What this run does not prove is the fence itself: a stale outcome rarely
// meets a replayed job here (replays leave leased jobs alone, and a killed
// consumer reports nothing), and with complete_jobs' fence removed a run
// still passed. The fence is proven by the streamer's and consumers' own
// tests (a replay resetting the attempt number included).
func TestChaosReplaysDuringFaults(t *testing.T) {
	needChaos(t)
	cluster := chaosCluster(t, filepath.Join(pgtest.TempDir(t), "pg"), nil)
	nats := natstest.Start(t)
	target, targetURL := newCountingTarget(t, chaosForwardSecret)
	runChaos(t, chaosRun{scenario: "replays during faults", dbURL: cluster.URL("postgres"),
		checkURL: func() string { return cluster.URL("postgres") }, nats: nats, faults: firstRunFaults(cluster, nats), killServices: true,
		total: envInt("INLET_CHAOS_N", 5000), rate: envInt("INLET_CHAOS_RATE", 250),
		target: target, targetURL: targetURL,
		replay: []string{"--handler", "effect", "--since", "5s", "--max-jobs", "1000000"}, replayEvery: 2 * time.Second,
		check: func(t *testing.T, conn *pgx.Conn, target *countingTarget) {
			rows, err := conn.Query(context.Background(), `SELECT job_id, max(started_at)
				FROM webhook_ingress.job_attempts WHERE outcome = 'replayed' GROUP BY job_id`)
			if err != nil {
				t.Fatal(err)
			}
			lastReplay := map[string]time.Time{}
			for rows.Next() {
				var id int64
				var at time.Time
				if err := rows.Scan(&id, &at); err != nil {
					t.Fatal(err)
				}
				lastReplay[strconv.FormatInt(id, 10)] = at
			}
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
			target.mu.Lock()
			lastCall := map[string]time.Time{}
			for _, c := range target.calls["/"] {
				if c.at.After(lastCall[c.job]) {
					lastCall[c.job] = c.at
				}
			}
			target.mu.Unlock()
			missed := 0
			for job, at := range lastReplay {
				if !lastCall[job].After(at) {
					missed++
					if missed <= 5 {
						t.Errorf("job %s replayed at %s, last called at %s: an outcome from before the replay marked it done",
							job, at.Format(time.RFC3339Nano), lastCall[job].Format(time.RFC3339Nano))
					}
				}
			}
			if len(lastReplay) == 0 {
				t.Error("no job was replayed: the run did not test replays")
			}
			t.Logf("replayed jobs %d; called after their last replay: %d; not: %d", len(lastReplay), len(lastReplay)-missed, missed)
		}})
}

// waitCircuitOpen waits until handler's circuit breaker is open.
func waitCircuitOpen(dbURL, handler string, within time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	last := "no answer"
	for {
		if conn, err := pgx.Connect(ctx, dbURL); err == nil {
			var circuit string
			err = conn.QueryRow(ctx, `SELECT circuit FROM webhook_ingress.handler_limits WHERE handler = $1`, handler).Scan(&circuit)
			_ = conn.Close(context.Background())
			if err == nil && circuit == "open" {
				return nil
			}
			last = fmt.Sprintf("circuit %q (%v)", circuit, err)
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s's circuit did not open within %s: %s", handler, within, last)
		case <-time.After(100 * time.Millisecond): // polling the database, as an operator's query would
		}
	}
}

// checkEntityOrder fails when the first call for an entity's event comes
// after a call for a later event of that entity (by its body's n), and when
// no entity had two events (the check would then prove nothing). A repeat
// of an event already called may come late: two consumers given one bus
// message both run its attempt (package consumers, "Can a handler run
// twice for one attempt?"), and the slower one's call can trail the next
// event's; those are counted and logged, not failed.
func checkEntityOrder(t *testing.T, calls []targetCall) {
	t.Helper()
	high := map[string]int{}            // entity → highest n called so far
	called := map[string]map[int]bool{} // entity → the n called so far
	violations, lateRepeats := 0, 0
	for _, c := range calls {
		var b struct {
			N      int    `json:"n"`
			Entity string `json:"entity"`
		}
		if err := json.Unmarshal(c.body, &b); err != nil || b.Entity == "" {
			t.Fatalf("ordered handler's call for job %s: body %q is not the run's: %v", c.job, c.body, err)
		}
		if called[b.Entity] == nil {
			called[b.Entity] = map[int]bool{}
		}
		h, seen := high[b.Entity]
		switch {
		case called[b.Entity][b.N] && b.N < h:
			lateRepeats++
		case seen && b.N < h:
			violations++
			if violations <= 5 {
				t.Errorf("entity %s: event %d (job %s) first called after event %d", b.Entity, b.N, c.job, h)
			}
		default:
			high[b.Entity] = max(h, b.N)
		}
		called[b.Entity][b.N] = true
	}
	if violations > 5 {
		t.Errorf("… %d events first called out of their entity's order in all", violations)
	}
	multi := 0
	for _, ns := range called {
		if len(ns) > 1 {
			multi++
		}
	}
	if multi == 0 {
		t.Errorf("no entity had two events among %d calls: order was not tested", len(calls))
	}
	t.Logf("ordered handler: %d calls, %d entities (%d with more than one event), %d first calls out of order, %d repeats after a later event",
		len(calls), len(called), multi, violations, lateRepeats)
}

// faketimeLibrary finds libfaketime, installing it with apt-get when absent
// (root only).
func faketimeLibrary(t *testing.T) string {
	t.Helper()
	find := func() string {
		m, _ := filepath.Glob("/usr/lib/*/faketime/libfaketime.so.1")
		if len(m) == 0 {
			m, _ = filepath.Glob("/usr/lib/faketime/libfaketime.so.1")
		}
		if len(m) == 0 {
			return ""
		}
		return m[0]
	}
	if lib := find(); lib != "" {
		return lib
	}
	if os.Geteuid() != 0 {
		t.Skip("libfaketime is not installed (apt-get install libfaketime)")
	}
	install := func() error {
		out, err := exec.Command("apt-get", "install", "-y", "-q", "libfaketime").CombinedOutput()
		if err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		return nil
	}
	if err := install(); err != nil {
		if out, err := exec.Command("apt-get", "update", "-q").CombinedOutput(); err != nil {
			t.Fatalf("apt-get update: %v: %s", err, out)
		}
		if err := install(); err != nil {
			t.Fatalf("apt-get install libfaketime: %v", err)
		}
	}
	lib := find()
	if lib == "" {
		t.Fatal("libfaketime installed but libfaketime.so.1 not found")
	}
	return lib
}

// runChaos starts the services, sends, injects the faults, waits for every
// job to finish, prints the table and fails on any loss.
func runChaos(t *testing.T, run chaosRun) chaosReport {
	t.Helper()
	ctx := context.Background()
	const ghSecret = "chaos-github-secret"
	const fwdSecret = chaosForwardSecret
	rep := chaosReport{scenario: run.scenario}

	target, targetURL := run.target, run.targetURL
	if target == nil {
		target, targetURL = newCountingTarget(t, fwdSecret)
	}
	ingressAddrs := []string{freeAddr(t), freeAddr(t)}
	storage := ""
	if run.natsStorage != "" {
		storage = "\n  storage: " + run.natsStorage
	}
	var more strings.Builder
	for _, h := range run.handlers {
		fmt.Fprintf(&more, "    - name: %s\n      type: http-forward\n      url: %q\n      secret: %q\n      timeout: 5s\n      concurrency: 16\n      max_attempts: 1000\n",
			h.name, targetURL+"/"+h.name, fwdSecret)
		for _, kv := range h.settings {
			fmt.Fprintf(&more, "      %s\n", kv)
		}
	}
	wake := "notify"
	if run.wake != "" {
		wake = run.wake + "\n  slot_name: ${INLET_CHAOS_SLOT}" // each streamer reads its own slot
	}
	cfg := writeFile(t, t.TempDir(), "inlet.yaml", fmt.Sprintf(`
database_url: ${DATABASE_URL}
ingress:
  metrics_listen: "127.0.0.1:0"
sources:
  - name: github
    type: github
    secrets: [%q]
bus:
  kind: nats
  url: %q
  ack_wait: 5s%s
streamer:
  wake: %s
  lease_duration: 4s
  max_leased_per_handler: 300
  reap_interval: 500ms
  poll_interval: 500ms
  health_listen: "127.0.0.1:0"
consumer:
  lease_extend: 2s
  health_listen: "127.0.0.1:0"
  handlers:
    - name: effect
      type: http-forward
      url: %q
      secret: %q
      timeout: 5s
      concurrency: 16
      max_attempts: 1000
%slog:
  level: info
`, ghSecret, run.nats.URL(), storage, wake, targetURL, fwdSecret, more.String()))
	env := cleanEnv("DATABASE_URL=" + run.dbURL)
	var services []*service
	add := func(name string, args ...string) *service {
		s := &service{name: name, args: append(args, "--config", cfg),
			env: append(env[:len(env):len(env)], "INLET_CHAOS_SLOT=inlet_chaos_"+strings.ReplaceAll(name, "-", "_"))}
		services = append(services, s)
		return s
	}
	for i := range 3 {
		add(fmt.Sprintf("consumer-%d", i), "consumer")
	}
	for i := range 2 {
		add(fmt.Sprintf("streamer-%d", i), "streamer")
	}
	for i, a := range ingressAddrs {
		add(fmt.Sprintf("ingress-%d", i), "ingress", "--listen", a)
	}
	for _, s := range services {
		s.start(t)
		if s.args[0] == "consumer" {
			s.p.waitLog("consumers started", 60*time.Second) // the subscription exists before events arrive
		}
	}
	for _, s := range services[3:] {
		s.p.waitLog(map[string]string{"streamer": "streamer started", "ingress": "ingress listening"}[s.args[0]], 60*time.Second)
	}

	// Senders: like a provider, retry each webhook until it is acknowledged;
	// at least run.total of them, and on until the faults are over.
	var sent, acked, attempts atomic.Int64
	var ackedIDs sync.Map // webhook number → true
	chaosDone := make(chan struct{})
	chaosOver := func() bool {
		select {
		case <-chaosDone:
			return true
		default:
			return false
		}
	}
	var answersMu sync.Mutex
	answers := map[string]int{}
	answered := func(what string) {
		answersMu.Lock()
		answers[what]++
		answersMu.Unlock()
	}
	client := &http.Client{Timeout: 5 * time.Second}
	next := atomic.Int64{}
	var pace <-chan time.Time
	if run.rate > 0 {
		tick := time.NewTicker(time.Second / time.Duration(run.rate))
		defer tick.Stop()
		pace = tick.C
	}
	var senders sync.WaitGroup
	sendCtx, stopSending := context.WithTimeout(ctx, 10*time.Minute)
	defer stopSending()
	for sender := range 8 {
		senders.Go(func() {
			for {
				if pace != nil {
					select {
					case <-pace:
					case <-sendCtx.Done():
						return
					}
				}
				i := next.Add(1) - 1
				if i >= int64(run.total) && chaosOver() {
					return
				}
				id := fmt.Sprintf("chaos-%05d", i)
				// Each sender owns its entities and sends one webhook
				// at a time (retried until acknowledged): an entity's
				// events arrive in the order of n.
				body := fmt.Appendf(nil, `{"n":%d,"entity":"s%d-%d"}`, i, sender, i%16)
				sent.Add(1)
				for sendCtx.Err() == nil {
					attempts.Add(1)
					req, _ := http.NewRequestWithContext(sendCtx, http.MethodPost,
						"http://"+ingressAddrs[rand.N(len(ingressAddrs))]+"/webhooks/github", bytes.NewReader(body))
					for k, v := range verify.SignGitHub(ghSecret, id, "push", body) {
						req.Header[k] = v
					}
					resp, err := client.Do(req)
					if err != nil {
						answered("error")
					} else {
						resp.Body.Close()
						if resp.StatusCode == http.StatusOK {
							ackedIDs.Store(i, true)
							acked.Add(1)
							break
						}
						answered(strconv.Itoa(resp.StatusCode))
					}
					time.Sleep(50 * time.Millisecond) // the sender's pause before a retry, as a provider's
				}
			}
		})
	}

	// Faults: the listed ones in order, one every 2-3 s; with killServices a
	// random service is killed between them and after them until run.total
	// have been sent. Two more rounds after the last fault: traffic goes on
	// through the recovery.
	var kills atomic.Int64
	var faultsDone []string
	go func() {
		defer close(chaosDone)
		faults := run.faults
		calm := 0 // rounds since the last fault
		for round := 0; sendCtx.Err() == nil && (len(faults) > 0 || calm < 2 || (run.killServices && next.Load() < int64(run.total))); round++ {
			time.Sleep(time.Duration(2000+rand.N(1000)) * time.Millisecond) // the pace of the faults, not a wait for anything
			if len(faults) == 0 {
				calm++
			}
			if len(faults) > 0 && (!run.killServices || round%2 == 1) {
				f := faults[0]
				faults = faults[1:]
				t.Logf("chaos: %s", f.name)
				if err := f.do(t); err != nil {
					t.Errorf("chaos %s: %v", f.name, err)
					stopSending() // nothing would acknowledge them: fail now, not at the 10 min deadline
					return
				}
				faultsDone = append(faultsDone, f.name)
				continue
			}
			if run.killServices {
				s := services[rand.N(len(services))]
				s.kill(t)
				kills.Add(1)
				s.start(t)
			}
		}
	}()
	// The operator: replays while the faults go on.
	var replays, replaysFailed atomic.Int64
	operatorDone := make(chan struct{})
	go func() {
		defer close(operatorDone)
		if run.replay == nil {
			return
		}
		for !chaosOver() {
			time.Sleep(run.replayEvery) // the operator's pace, not a wait for anything
			ctx, cancel := context.WithTimeout(ctx, time.Minute)
			cmd := exec.CommandContext(ctx, inletBin, append([]string{"replay"}, run.replay...)...)
			cmd.Env, cmd.Dir = env, t.TempDir()
			out, err := cmd.CombinedOutput()
			cancel()
			if err != nil {
				replaysFailed.Add(1)
				// The database down or frozen fails a replay; a deadlock
				// (its locks against the pipeline's) or a usage error
				// must not.
				if bytes.Contains(out, []byte("40P01")) || cmd.ProcessState.ExitCode() == 2 {
					t.Errorf("inlet replay failed while the database was up: %v: %s", err, bytes.TrimSpace(out))
				} else {
					t.Logf("chaos: inlet replay failed (retried at the next turn): %v: %s", err, bytes.TrimSpace(out))
				}
				continue
			}
			replays.Add(1)
		}
	}()
	senders.Wait()
	<-chaosDone
	<-operatorDone
	if run.replay != nil {
		t.Logf("operator: %d replays, %d failed", replays.Load(), replaysFailed.Load())
	}
	total := int(sent.Load())
	perEvent := 1 + len(run.handlers)
	rep.faults = faultsDone
	if sendCtx.Err() != nil {
		t.Fatalf("sending did not finish: %d of %d acknowledged", acked.Load(), total)
	}

	conn, err := pgx.Connect(ctx, run.checkURL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var events, distinctIDs, jobs, completed, dead int
	deadline := time.Now().Add(4 * time.Minute)
	for {
		err := conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM webhook_ingress.events),
			(SELECT count(DISTINCT external_event_id) FROM webhook_ingress.events),
			count(*), count(*) FILTER (WHERE status = 'completed'), count(*) FILTER (WHERE status = 'dead_letter')
			FROM webhook_ingress.jobs`).Scan(&events, &distinctIDs, &jobs, &completed, &dead)
		if err != nil {
			t.Fatal(err)
		}
		if completed+dead == jobs && jobs >= int(acked.Load())*perEvent {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("after 4 minutes: %d jobs, %d completed, %d dead letters", jobs, completed, dead)
			break
		}
		// Not testwait: after the deadline the run goes on to print its table.
		time.Sleep(250 * time.Millisecond)
	}
	rows, err := conn.Query(ctx, `SELECT external_event_id FROM webhook_ingress.events`)
	if err != nil {
		t.Fatal(err)
	}
	stored, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	storedSet := make(map[string]bool, len(stored))
	for _, id := range stored {
		storedSet[id] = true
	}
	ackedIDs.Range(func(i, _ any) bool {
		if !storedSet[fmt.Sprintf("chaos-%05d", i)] {
			rep.ackedMissing++
		}
		return true
	})
	rows, err = conn.Query(ctx, `SELECT outcome || coalesce('/' || error_class, '') || '=' || count(*)
		FROM webhook_ingress.attempts GROUP BY outcome, error_class ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	byOutcome, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("attempts by outcome/error class: %v", byOutcome)
	target.mu.Lock()
	rep.delivered, rep.badSignature = len(target.keys), target.bad
	for _, n := range target.keys {
		rep.duplicates += n - 1
	}
	target.mu.Unlock()
	rep.sent, rep.acked, rep.httpAttempts = int(sent.Load()), int(acked.Load()), int(attempts.Load())
	answersMu.Lock()
	rep.answers = answers
	answersMu.Unlock()
	rep.stored, rep.jobs, rep.stuck, rep.deadLetters, rep.killed = events, jobs, jobs-completed-dead, dead, int(kills.Load())
	t.Log(rep.table())
	for _, want := range run.expectLogs {
		found := false
		for _, s := range services {
			s.mu.Lock()
			found = found || strings.Contains(s.p.out()+s.p.errOut(), want)
			s.mu.Unlock()
		}
		if !found {
			t.Errorf("no service logged %q: the run did not take the path it proves", want)
		}
	}
	for status, n := range rep.answers {
		if status != "error" && status[0] == '4' {
			// A provider drops a webhook answered 4xx: a fault of ours must
			// never look permanent.
			t.Errorf("%d valid webhooks answered %s during faults", n, status)
		}
	}
	switch {
	case rep.acked != total:
		t.Errorf("%d of %d webhooks acknowledged", rep.acked, total)
	case rep.ackedMissing != 0:
		t.Errorf("%d acknowledged webhooks are not in events", rep.ackedMissing)
	case events != distinctIDs || events != total:
		t.Errorf("events %d, distinct ids %d, want %d each (exactly once)", events, distinctIDs, total)
	case jobs != total*perEvent || completed != total*perEvent:
		t.Errorf("jobs %d, completed %d, want %d", jobs, completed, total*perEvent)
	case rep.delivered != total*perEvent:
		t.Errorf("handler effects for %d jobs, want %d: effects were lost", rep.delivered, total*perEvent)
	case rep.badSignature != 0:
		t.Errorf("%d forwarded requests failed the signature check", rep.badSignature)
	}
	if run.check != nil {
		run.check(t, conn, target)
	}
	return rep
}
