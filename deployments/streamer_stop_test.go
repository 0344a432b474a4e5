package deployments

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/internal/natstest"
)

// TestStreamerStopsWithinItsShippedGracePeriod (review helper-311, fixed).
// Defect: every shipped deployment gives inlet streamer 15 s between SIGTERM
// and SIGKILL (inlet-streamer.service TimeoutStopSec=15s,
// streamer-deployment.yaml terminationGracePeriodSeconds: 15, compose
// stop_grace_period: 15s), "longer than the drain deadline, so SIGTERM's
// drain finishes before SIGKILL"; deployments/README.md says the streamer
// "finishes its claim round (at most a few seconds)" and the deployment
// checks assume it stops within 5 s (deployments_test.go: streamerStop).
// While the database does not answer (a lock, a failover, a stalled
// network) the streamer does not stop at all: the loops that claim handlers
// apart (limited and ordered ones; they run in every streamer, the shipped
// one included) run each claim on context.WithoutCancel(ctx) with no
// deadline at all (streamer/apart.go: apartLoop, unlike claimRound's 10 s
// claimRoundTimeout), so their inFlight.atLimit -> recount ->
// CountLeasedJobs waits on the database for as long as it takes, holding
// inFlight.mu, which the main claim needs too; Streamer.Stop
// (loops.Stop) waits for that loop without bound. Every shipped deployment
// then SIGKILLs it, with the claim's leases (if it commits) left to the
// reaper. Even the bounded path is not shorter than the grace period:
// claimRoundTimeout 10 s + giveBackTimeout 5 s = 15 s, plus the 5 s health
// listener stop in cmd/inlet/services.go: runStreamer.
// Root cause: streamer/apart.go apartLoop (no deadline on the claims apart);
// deployments/ grace periods (15 s) and deployments_test.go streamerStop
// (5 s) sized from a stop bound the streamer does not have.
// Setup: a real cluster set up as deployments/README.md says (roles.sql as
// the owner), inlet-migrate.service's command, the shipped systemd streamer
// (inlet-streamer.service's ExecStart and streamer.env, etc/inlet/inlet.yaml
// with bus.url and health_listen moved to this test's ports) against a real
// NATS, ready; then a session holds an ACCESS EXCLUSIVE lock on
// webhook_ingress.jobs (the database not answering the streamer), and once
// a streamer statement has waited on it past the claim round's 10 s (or 15 s
// have passed) the streamer gets SIGTERM.
// Expected: it exits before the shortest shipped grace period (15 s).
// Observed: not exited 45 s after SIGTERM (its CountLeasedJobs had waited
// 12 s before it); it exited 20 ms after the lock was released, 45.04 s
// after SIGTERM. A goroutine dump shows claimApart -> atLimit -> recount ->
// CountLeasedJobs in Prepare, and the main claimMain blocked on inFlight.mu.
// Fixed (helper-312): Stop is bounded, streamer.StopTimeout (20 s): every
// claim loop ends its round when Stop begins (one still running started
// another while Stop waited for the others), an apart loop's recount has
// the main claim's claimRoundTimeout, whatever a round still waits for in
// the database is cut off claimRoundTimeout after Stop and its give-backs
// giveBackTimeout after that, and the reaper's pass has a deadline; the
// shipped grace periods are 30 s (StopTimeout + the 5 s listener stop + a
// margin), and deployments_test.go's streamerStop reads StopTimeout.
func TestStreamerStopsWithinItsShippedGracePeriod(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	// The shortest grace period the shipped files give the streamer.
	grace := 0 * time.Second
	note := func(d time.Duration) {
		if grace == 0 || d < grace {
			grace = d
		}
	}
	streamerUnit := readUnit(t, "inlet-streamer.service")
	if d, err := time.ParseDuration(streamerUnit.get("Service", "TimeoutStopSec")); err == nil {
		note(d)
	} else {
		t.Fatalf("TimeoutStopSec: %v", err)
	}
	cf, _ := readCompose(t)
	if s, ok := cf.Services["streamer"]; ok {
		d, err := composeDuration(s.StopGracePeriod, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		note(d)
	}
	byFile, _ := readManifests(t)
	for _, d := range decodeObjects(t, byFile).deployments {
		if d.Name == "inlet-streamer" && d.Spec.Template.Spec.TerminationGracePeriodSeconds != nil {
			note(time.Duration(*d.Spec.Template.Spec.TerminationGracePeriodSeconds) * time.Second)
		}
	}
	if grace == 0 {
		t.Fatal("no grace period found for the streamer")
	}

	bin := filepath.Join(t.TempDir(), "inlet")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/inlet").CombinedOutput(); err != nil {
		t.Fatalf("go build cmd/inlet: %v\n%s", err, out)
	}
	nats := natstest.Start(t)
	c := r287Cluster(t, nil)

	migrateUnit := readUnit(t, "inlet-migrate.service")
	migrateEnv := r287Env(t, c, migrateUnit)
	{
		args := r287Exec(t, migrateUnit, bin, "")
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Env, cmd.Dir = migrateEnv, "/"
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("migrate: %v\n%s", err, out)
		}
	}
	var ownerURL string
	for _, kv := range migrateEnv {
		if v, ok := strings.CutPrefix(kv, "DATABASE_URL="); ok {
			ownerURL = v
		}
	}

	yml, err := os.ReadFile(filepath.Join(systemdDir, "etc", "inlet", "inlet.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	health := r287Free(t)
	yml = bytes.Replace(yml, []byte("nats://127.0.0.1:4222"), []byte(nats.URL()), 1)
	yml = bytes.Replace(yml, []byte(`health_listen: "127.0.0.1:8081"`), []byte(`health_listen: "`+health+`"`), 1)
	yml = bytes.Replace(yml, []byte(`health_listen: "127.0.0.1:8082"`), []byte(`health_listen: "`+r287Free(t)+`"`), 1)
	cfgPath := filepath.Join(t.TempDir(), "inlet.yaml")
	if err := os.WriteFile(cfgPath, yml, 0o600); err != nil {
		t.Fatal(err)
	}
	args := r287Exec(t, streamerUnit, bin, cfgPath)
	streamer := exec.Command(args[0], args[1:]...)
	streamer.Env, streamer.Dir = r287Env(t, c, streamerUnit), "/"
	var out bytes.Buffer
	streamer.Stdout, streamer.Stderr = &out, &out
	if err := streamer.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = streamer.Wait(); close(done) }()
	t.Cleanup(func() {
		select {
		case <-done:
		default:
			_ = streamer.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("streamer output:\n%s", out.String())
		}
	})
	testReady := func() bool {
		resp, err := http.Get("http://" + health + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}
	for deadline := time.Now().Add(90 * time.Second); !testReady(); time.Sleep(200 * time.Millisecond) {
		select {
		case <-done:
			t.Fatal("the shipped streamer exited before it was ready")
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the shipped streamer not ready within 90s")
		}
	}

	// The database stops answering the claim: a lock on jobs.
	locker, err := pgx.Connect(ctx, ownerURL)
	if err != nil {
		t.Fatal(err)
	}
	tx, err := locker.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	released := false
	release := func() {
		if !released {
			released = true
			_ = tx.Rollback(context.Background())
		}
	}
	t.Cleanup(func() { release(); _ = locker.Close(context.Background()) })
	if _, err := tx.Exec(ctx, `LOCK TABLE webhook_ingress.jobs IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	locked := time.Now()
	watcher, err := pgx.Connect(ctx, c.URL("inlet")) // a superuser: sees every session
	if err != nil {
		t.Fatal(err)
	}
	defer watcher.Close(ctx)
	// SIGTERM once a streamer statement waits on the lock and either has
	// waited past the claim round's own deadline (10s) or 15s have passed.
	var waited time.Duration
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		var waiting int
		var longest float64
		if err := watcher.QueryRow(ctx, `SELECT count(*), coalesce(max(extract(epoch FROM now() - query_start)), 0)::float8
			FROM pg_stat_activity WHERE application_name = 'inlet-streamer' AND wait_event_type = 'Lock'`).Scan(&waiting, &longest); err != nil {
			t.Fatal(err)
		}
		waited = time.Duration(longest * float64(time.Second))
		if waiting > 0 && (waited > 12*time.Second || time.Since(locked) > 15*time.Second) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the streamer's claim never waited on the lock within 60s")
		}
	}

	sigterm := time.Now()
	if err := streamer.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
		took := time.Since(sigterm)
		t.Logf("the shipped streamer exited %s after SIGTERM (a streamer statement had waited %s); grace period %s",
			took.Round(10*time.Millisecond), waited.Round(time.Second), grace)
		if took >= grace {
			t.Errorf("the shipped streamer took %s to exit after SIGTERM while its database did not answer "+
				"(a streamer statement had waited %s); the shipped grace period (TimeoutStopSec, terminationGracePeriodSeconds, stop_grace_period) is %s: SIGKILL cuts its stop",
				took.Round(10*time.Millisecond), waited.Round(time.Second), grace)
		}
		return
	case <-time.After(grace + 30*time.Second):
	}
	// Still running: let the database answer again and see when it goes.
	release()
	unlocked := time.Now()
	select {
	case <-done:
		t.Errorf("the shipped streamer did not exit within %s of SIGTERM while its database did not answer (a streamer statement had waited %s before SIGTERM, "+
			"with no deadline); it exited %s after the lock was released, %s after SIGTERM; the shipped grace period is %s: SIGKILL is what stops it",
			grace+30*time.Second, waited.Round(time.Second), time.Since(unlocked).Round(10*time.Millisecond), time.Since(sigterm).Round(10*time.Millisecond), grace)
	case <-time.After(60 * time.Second):
		t.Errorf("the shipped streamer did not exit within %s of SIGTERM, nor within 60s after its database answered again; the shipped grace period is %s",
			grace+30*time.Second, grace)
	}
}
