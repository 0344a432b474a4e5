package tests

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/internal/natstest"
	"github.com/inlet-dev/inlet/internal/pgtest"
)

// rev307First076 is the commit that first added migration 076
// (claim_receivable_jobs): its 076 creates role_covers and job_receivable,
// which its streamer's reaper (ReapExpiredLeases) and LimitedWakeIn call.
// da224e5 rewrote 076 in place: the file now creates receivable_scopes,
// scopes_cover and receives instead, and no later migration touches them.
const rev307First076 = "2be9df6443f95e92336394fd2902ad72b31acd40"

var upgrade076Builds sync.Map // rev -> *upgrade076Build

type upgrade076Build struct {
	once sync.Once
	bin  string
	err  error
	skip string
}

// upgrade076OldInlet builds cmd/inlet of rev from `git archive` (the working
// tree and the index are not touched) and returns the binary. It is kept in
// TMPDIR across runs (keyed by the commit). The test is skipped, saying why,
// when git or the commit is missing (a shallow clone).
func upgrade076OldInlet(t *testing.T, rev string) string {
	t.Helper()
	v, _ := upgrade076Builds.LoadOrStore(rev, &upgrade076Build{})
	b := v.(*upgrade076Build)
	b.once.Do(func() {
		if _, err := exec.LookPath("git"); err != nil {
			b.skip = "git is not installed: cannot build the older inlet " + rev
			return
		}
		top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
		if err != nil {
			b.skip = "not inside a git checkout: cannot build the older inlet " + rev
			return
		}
		root := strings.TrimSpace(string(top))
		if err := exec.Command("git", "-C", root, "cat-file", "-e", rev+"^{commit}").Run(); err != nil {
			b.skip = "commit " + rev + " is not in this clone (shallow?): cannot build the older inlet"
			return
		}
		dir := filepath.Join(os.TempDir(), "inlet-upgrade076-"+rev[:12])
		bin := filepath.Join(dir, "inlet")
		if _, err := os.Stat(bin); err == nil {
			b.bin = bin
			return
		}
		src := filepath.Join(dir, "src")
		_ = os.RemoveAll(src)
		if err := os.MkdirAll(src, 0o755); err != nil {
			b.err = err
			return
		}
		archive := exec.Command("git", "-C", root, "archive", rev)
		tar := exec.Command("tar", "-x", "-C", src)
		pipe, err := archive.StdoutPipe()
		if err != nil {
			b.err = err
			return
		}
		tar.Stdin = pipe
		var archiveErr, tarErr bytes.Buffer
		archive.Stderr, tar.Stderr = &archiveErr, &tarErr
		if err := tar.Start(); err != nil {
			b.err = err
			return
		}
		if err := archive.Run(); err != nil {
			b.err = fmt.Errorf("git archive %s: %v\n%s", rev, err, archiveErr.String())
			return
		}
		if err := tar.Wait(); err != nil {
			b.err = fmt.Errorf("untar %s: %v\n%s", rev, err, tarErr.String())
			return
		}
		build := exec.Command("go", "build", "-ldflags=-w", "-o", bin+".tmp", "./cmd/inlet")
		build.Dir = src
		var env []string
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, "GOWORK=") && !strings.HasPrefix(kv, "GOFLAGS=") {
				env = append(env, kv)
			}
		}
		build.Env = env
		if out, err := build.CombinedOutput(); err != nil {
			b.err = fmt.Errorf("build inlet at %s: %v\n%s", rev, err, out)
			return
		}
		if err := os.Rename(bin+".tmp", bin); err != nil {
			b.err = err
			return
		}
		_ = os.RemoveAll(src)
		b.bin = bin
	})
	if b.skip != "" {
		t.Skip(b.skip)
	}
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.bin
}

// upgrade076Run runs bin to completion.
func upgrade076Run(t *testing.T, bin string, env []string, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = env
	cmd.Dir = t.TempDir()
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); ok {
		return string(out), ee.ExitCode()
	} else if err != nil {
		t.Fatalf("run %s %v: %v", bin, args, err)
	}
	return string(out), 0
}

// upgrade076Config is ingress, streamer and consumer over NATS; the one
// handler, "limited" (log), has max_in_flight 4, so the streamer claims it
// through ClaimLimitedJobs (claim_limited_jobs + LimitedWakeIn).
func upgrade076Config(t *testing.T, natsURL string) (path, ingressAddr string) {
	t.Helper()
	ingressAddr = freeAddr(t)
	path = writeFile(t, t.TempDir(), "inlet.yaml", fmt.Sprintf(`
database_url: ${DATABASE_URL}
ingress:
  listen: %q
  metrics_listen: "127.0.0.1:0"
sources:
  - name: github
    type: github
    secrets: ["upgrade076-secret"]
bus:
  kind: nats
  url: %q
streamer:
  lease_duration: 3s
  reap_interval: 250ms
  poll_interval: 250ms
  health_listen: "127.0.0.1:0"
consumer:
  lease_extend: 1s
  health_listen: "127.0.0.1:0"
  handlers:
    - name: limited
      type: log
      max_in_flight: 4
      max_attempts: 3
`, ingressAddr, natsURL))
	return path, ingressAddr
}

// TestDatabaseMigratedByFirst076GetsTheLimitedClaim (review helper-307, fixed).
// Defect: migration 076 was rewritten in place after it was committed. At
// 2be9df6 it created role_covers and job_receivable (and a claim_limited_jobs
// calling job_receivable); da224e5 replaced the file's body with
// receivable_scopes, scopes_cover, receives and another claim_limited_jobs,
// keeping the number. A database `inlet migrate` took to 076 at 2be9df6 has
// schema_migrations at 76, so this version's `inlet migrate`
// (schema/migrate.go Migrate: only versions above the recorded maximum) applies
// nothing and exits 0, and schema.Check (version only) calls it current; but
// this version's LimitedWakeIn (schema/queries/limits.sql) calls
// webhook_ingress.receivable_scopes, which does not exist there. Every claim of
// a handler with a limit (max_in_flight, rate_limit, breaker) fails and rolls
// back, retried for ever: its jobs are never delivered, while the schema
// check passes. docs/pipeline.md: "run `inlet migrate`, then replace the
// services"; 076's header: "it runs twice safely".
// Setup: a fresh database; `inlet migrate` of 2be9df6 (real binary built from
// git archive); this version's `inlet migrate`; this version's consumer,
// streamer and ingress over real NATS; handler "limited" (log,
// max_in_flight 4); 3 signed GitHub webhooks.
// Expected: the 3 jobs completed within 90 s.
// Observed: 0 of 3 completed after 90 s, all 3 pending with 0 attempts; the
// streamer logs `function webhook_ingress.receivable_scopes(text) does not
// exist (SQLSTATE 42883)` on every claim of the handler; `inlet migrate`
// exited 0 having applied nothing.
// Fixed: 077 runs the rewritten 076's functions again (and keeps the
// first one's for its streamers); schema/migrations.sum pins every
// committed migration's text (TestCommittedMigrationsAreUnchanged).
func TestDatabaseMigratedByFirst076GetsTheLimitedClaim(t *testing.T) {
	t.Parallel()
	old := upgrade076OldInlet(t, rev307First076)
	nats := natstest.Start(t)
	dbURL := pgtest.NewEmptyDatabase(t)
	env := cleanEnv("DATABASE_URL=" + dbURL)

	out, code := upgrade076Run(t, old, env, "migrate")
	if code != 0 {
		t.Fatalf("inlet migrate of %s: exit %d\n%s", rev307First076[:7], code, out)
	}
	newOut, newErr, code := runInlet(t, env, "migrate")
	if code != 0 {
		t.Fatalf("this version's inlet migrate: exit %d\n%s%s", code, newOut, newErr)
	}
	t.Logf("this version's inlet migrate after %s's: exit 0\n%s%s", rev307First076[:7], newOut, newErr)

	cfg, addr := upgrade076Config(t, nats.URL())
	c := start(t, env, "consumer", "--config", cfg)
	c.waitLog("consumers started", 60*time.Second)
	s := start(t, env, "streamer", "--config", cfg)
	s.waitLog("streamer started", 60*time.Second)
	ing := start(t, env, "ingress", "--config", cfg)
	ing.waitLog("ingress listening", 60*time.Second)
	const n = 3
	for i := 0; i < n; i++ {
		sendGitHub(t, "http://"+addr, "upgrade076-secret", fmt.Sprintf("r307-a-%d", i), []byte(`{"zen":"upgrade076"}`))
	}

	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	deadline := time.Now().Add(90 * time.Second)
	var completed, pending, attempts int
	for {
		if err := conn.QueryRow(ctx, `SELECT count(*) FILTER (WHERE status = 'completed'),
			count(*) FILTER (WHERE status = 'pending'), coalesce(sum(attempt_count), 0)
			FROM webhook_ingress.jobs WHERE handler = 'limited'`).Scan(&completed, &pending, &attempts); err != nil {
			t.Fatal(err)
		}
		if completed == n || time.Now().After(deadline) {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	if completed != n {
		var fns []string
		rows, _ := conn.Query(ctx, `SELECT p.proname FROM pg_proc p JOIN pg_namespace s ON s.oid = p.pronamespace
			WHERE s.nspname = 'webhook_ingress' AND p.proname IN ('receivable_scopes', 'receives', 'scopes_cover', 'job_receivable', 'role_covers')
			ORDER BY 1`)
		for rows.Next() {
			var f string
			_ = rows.Scan(&f)
			fns = append(fns, f)
		}
		rows.Close()
		logLine := ""
		for _, l := range strings.Split(s.errOut(), "\n") {
			if strings.Contains(l, "does not exist") {
				logLine = l
				break
			}
		}
		t.Fatalf("a database migrated to 076 by %s, then by this version's inlet migrate (exit 0): %d of %d jobs of the limited handler "+
			"completed after 90 s (%d pending, %d attempts); 076's functions present: %v (this version's limited claim calls receivable_scopes); "+
			"streamer log: %s", rev307First076[:7], completed, n, pending, attempts, fns, logLine)
	}
}

// TestFirst076StreamerReapsAfterTheMigration (review helper-307, fixed).
// Defect: the other half of 076's rewrite in place. A streamer of 2be9df6 (the
// commit that added 076) runs, during a rolling upgrade, against the 076 this
// version's `inlet migrate` creates. Its reaper (ReapExpiredLeases) and its
// LimitedWakeIn call webhook_ingress.job_receivable, which 2be9df6's 076
// created and the rewritten 076 (da224e5) no longer does. 076's header says
// "A streamer of the previous version calls the new claim_limited_jobs, whose
// signature is unchanged", and docs/pipeline.md "run `inlet migrate`, then
// replace the services in any order". But every reap pass of that streamer
// fails: a lease whose consumer died is never ended, so the job stays
// `leased` with its lease long expired (neither retried nor dead-lettered)
// for as long as only such streamers run; DESIGN "every job ends completed or
// dead-lettered". (Its limited claims fail too, for the same reason.)
// Setup: a fresh database migrated by this version; this version's consumer
// (handler "limited", log, registers the subscription), killed with SIGKILL
// once it is up, its liveness row left alive for a few seconds (a crashed
// pod); a job leased for it by hand as the crashed consumer's (status leased,
// lease expired 10 s ago, attempted 20 s ago: the consumer was seen after);
// then 2be9df6's `inlet streamer` (real binary) with reap_interval 250ms.
// Expected: within 60 s the reaper ends the expired lease (pending/failed for
// a retry, the attempt recorded lease_expired).
// Observed: after 60 s the job is still `leased`, lease expired ~70 s ago; the
// old streamer logs `function webhook_ingress.job_receivable(...) does not
// exist (SQLSTATE 42883)` on each reap.
// Fixed: 077 recreates role_covers and job_receivable as 2be9df6's 076
// had them, for streamers of that commit during a rolling upgrade.
func TestFirst076StreamerReapsAfterTheMigration(t *testing.T) {
	t.Parallel()
	old := upgrade076OldInlet(t, rev307First076)
	nats := natstest.Start(t)
	dbURL := pgtest.NewDatabase(t) // migrated by this version
	env := cleanEnv("DATABASE_URL=" + dbURL)
	cfg, addr := upgrade076Config(t, nats.URL())
	_ = addr

	// The consumer registers the handler's subscription and liveness.
	c := start(t, env, "consumer", "--config", cfg)
	c.waitLog("consumers started", 60*time.Second)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	// An event of the handler, its job leased by a consumer that then
	// crashed: the lease expired 10 s ago, the consumer was seen after it
	// began (so the attempt counts).
	if _, err := conn.Exec(ctx, `INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, event_type, raw_body, signature_verified)
		VALUES ('github', 'github', 'r307-b-1', 'push', '{}', true)`); err != nil {
		t.Fatal(err)
	}
	_ = c.cmd.Process.Kill()
	<-c.done
	var jobID int64
	if err := conn.QueryRow(ctx, `UPDATE webhook_ingress.jobs SET status = 'leased', attempt_count = 1,
		lease_holder_id = 'crashed-streamer', attempted_at = now() - interval '20 seconds',
		lease_expires_at = now() - interval '10 seconds', updated_at = now()
		WHERE handler = 'limited' RETURNING id`).Scan(&jobID); err != nil {
		t.Fatalf("lease the job: %v", err)
	}

	s := startBin(t, old, env, "streamer", "--config", cfg)
	s.waitLog("streamer started", 60*time.Second)

	deadline := time.Now().Add(60 * time.Second)
	var status string
	var expiredFor float64
	for {
		if err := conn.QueryRow(ctx, `SELECT status, coalesce(extract(epoch FROM now() - lease_expires_at), 0)::float8
			FROM webhook_ingress.jobs WHERE id = $1`, jobID).Scan(&status, &expiredFor); err != nil {
			t.Fatal(err)
		}
		if status != "leased" || time.Now().After(deadline) {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	if status == "leased" {
		logLine := ""
		for _, l := range strings.Split(s.errOut(), "\n") {
			if strings.Contains(l, "reap expired leases failed") {
				logLine = l
				break
			}
		}
		t.Fatalf("a streamer of %s (the commit that added 076) on the 076 this version migrates: job %d still leased %.0f s after its lease "+
			"expired (reap_interval 250ms; want it given back or failed); streamer log: %s", rev307First076[:7], jobID, expiredFor, logLine)
	}
}
