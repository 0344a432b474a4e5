package tests

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/internal/natstest"
	"github.com/inlet-dev/inlet/internal/pgtest"
)

// rev339Before is the last commit before this release's migrations 079,
// 080 and 081 (its inlet migrate leaves a database at 078).
const rev339Before = "95b394f81289a93c7cb5dfba57cd57339f7e489e"

// r339Config is ingress, streamer and consumer over NATS; one handler,
// "plain" (log, no limits).
func r339Config(t *testing.T, natsURL string) (path, ingressAddr string) {
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
    secrets: ["r339-secret"]
bus:
  kind: nats
  url: %q
streamer:
  lease_duration: 5s
  reap_interval: 250ms
  poll_interval: 250ms
  health_listen: "127.0.0.1:0"
consumer:
  lease_extend: 2s
  health_listen: "127.0.0.1:0"
  handlers:
    - name: plain
      type: log
      max_attempts: 5
`, ingressAddr, natsURL))
	return path, ingressAddr
}

// TestConsumerStartedBeforeMigrateWaitsForIt (review helper-339, fixed).
// Defect: deployments/kubernetes/migrate-job.yaml says of the upgrade:
// "Services started before it finishes report not ready (/readyz checks
// the schema version) until it has", and docs/pipeline.md says a service of
// a new version started against a database without its migrations "reports
// not ready (schema.Check) until it is migrated". inlet consumer of this
// version against a database still at 078 (the previous release's schema,
// before this release's inlet migrate ran) does not: its first step,
// consumers.Service.Register -> registerLimits (consumers/register.go), asks
// 080's another_role_given for EVERY handler (limited or not), which does
// not exist yet, and runConsumer (cmd/inlet/services.go) returns the error:
// the process exits 1 at once with the raw SQL error, which says nothing of
// the schema version or of inlet migrate. In Kubernetes the pod goes into
// CrashLoopBackOff (restarts 10 s, 20 s, 40 s … up to 5 min apart), so the
// consumer comes back up to minutes after the migration ended; with
// systemd's Restart= limits it may stay down. ingress and streamer of this
// version do what the docs say (they stay up, /readyz 503, until migrated).
// Setup: a fresh database migrated by inlet migrate of 95b394f (the last
// commit before 079-081; real binary built from git archive); real NATS;
// this version's inlet consumer (handler "plain", log, no limits) started
// against it; after 10 s (or its exit) this version's inlet migrate, then
// this version's streamer and ingress; 3 signed GitHub webhooks.
// Expected: the consumer is still running when inlet migrate runs (reporting
// not ready), registers once the schema is current, and the 3 jobs complete
// within 90 s.
// Observed: the consumer exited (exit status 1) within ~1 s of its start:
// `inlet: start consumers: register subscriptions: ask whether another
// database role is given handler "plain": ERROR: function
// webhook_ingress.another_role_given(text, text) does not exist (SQLSTATE
// 42883)`; nothing consumed the jobs.
// Fixed: runConsumer waits (awaitSchema, every 2 s) while schema.Check says
// ErrSchemaNotCurrent, not ready meanwhile, and registers once it is
// current, as ingress and the streamer wait.
func TestConsumerStartedBeforeMigrateWaitsForIt(t *testing.T) {
	t.Parallel()
	old := upgrade076OldInlet(t, rev339Before)
	nats := natstest.Start(t)
	dbURL := pgtest.NewEmptyDatabase(t)
	env := cleanEnv("DATABASE_URL=" + dbURL)
	if out, code := upgrade076Run(t, old, env, "migrate"); code != 0 {
		t.Fatalf("inlet migrate of %s: exit %d\n%s", rev339Before[:7], code, out)
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var version int
	if err := conn.QueryRow(ctx, `SELECT max(version) FROM webhook_ingress.schema_migrations`).Scan(&version); err != nil {
		t.Fatal(err)
	}
	if version != 78 {
		t.Fatalf("test set-up: the previous release's inlet migrate left version %d, want 78", version)
	}

	cfg, addr := r339Config(t, nats.URL())
	c := start(t, env, "consumer", "--config", cfg)
	// Give it 10 s before the operator's inlet migrate: a pod started
	// before the migrate Job finished.
	exited := false
	select {
	case <-c.done:
		exited = true
	case <-time.After(10 * time.Second):
	}
	if exited {
		t.Fatalf("inlet consumer started against a database at version %d (before this release's inlet migrate) exited (%v) "+
			"instead of reporting not ready until the schema is migrated (deployments/kubernetes/migrate-job.yaml: "+
			"\"Services started before it finishes report not ready ... until it has\"); its stderr:\n%s",
			version, c.err, lastLines(c.errOut(), 3))
	}
	out, errOut, code := runInlet(t, env, "migrate")
	if code != 0 {
		t.Fatalf("this version's inlet migrate: exit %d\n%s%s", code, out, errOut)
	}
	s := start(t, env, "streamer", "--config", cfg)
	s.waitLog("streamer started", 60*time.Second)
	ing := start(t, env, "ingress", "--config", cfg)
	ing.waitLog("ingress listening", 60*time.Second)
	c.waitLog("consumers started", 60*time.Second)
	const n = 3
	for i := 0; i < n; i++ {
		sendGitHub(t, "http://"+addr, "r339-secret", fmt.Sprintf("r339-before-migrate-%d", i), []byte(`{"zen":"r339"}`))
	}
	deadline := time.Now().Add(90 * time.Second)
	var completed int
	for {
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM webhook_ingress.jobs WHERE handler = 'plain' AND status = 'completed'`).Scan(&completed); err != nil {
			t.Fatal(err)
		}
		if completed == n || time.Now().After(deadline) {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	if completed != n {
		t.Fatalf("%d of %d jobs completed within 90 s of the migration", completed, n)
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
