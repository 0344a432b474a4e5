package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/inletyaml"
	"github.com/inlet-dev/inlet/internal/config"
	"github.com/inlet-dev/inlet/internal/freeport"
	"github.com/inlet-dev/inlet/internal/pgtest"
	"github.com/inlet-dev/inlet/internal/testwait"
)

// devInProcess runs inlet dev in-process with args (absolute paths only:
// the test changes directory meanwhile) until the test ends, and waits for
// its walkthrough ("Ctrl-C stops."). stop stops it and returns its error.
func devInProcess(t *testing.T, args ...string) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	out := &syncBuffer{}
	finished := make(chan struct{})
	var devErr error
	go func() {
		defer close(finished)
		devErr = run(ctx, &environment{stdout: out, stderr: out}, append([]string{"dev"}, args...))
	}()
	stop = func() error {
		cancel()
		select {
		case <-finished:
			return devErr
		case <-time.After(60 * time.Second):
			return errors.New("inlet dev did not stop within 60s of its cancel")
		}
	}
	t.Cleanup(func() { _ = stop() })
	testwait.Eventually(t, 120*time.Second, "inlet dev started", func() (bool, string) {
		select {
		case <-finished:
			t.Fatalf("inlet dev ended before it started: %v\n%s", devErr, out.String())
		default:
		}
		return strings.Contains(out.String(), "Ctrl-C stops."), out.String()
	})
	return stop
}

// runInletIn runs one inlet command in dir and returns stdout, stderr and
// its error.
func runInletIn(t *testing.T, dir string, args ...string) (string, string, error) {
	t.Helper()
	t.Chdir(dir)
	var out, errOut bytes.Buffer
	err := run(context.Background(), &environment{stdout: &out, stderr: &errOut}, args)
	return out.String(), errOut.String(), err
}

// TestSubdirectoryUsesTheProjectsConfig (review helper-231, fixed).
// Defect: a command run in a subdirectory of a project (a directory holding
// inlet.yaml, where inlet dev runs) finds the project's .inlet/ (its
// database_url and ingress_url: findDevFile walks up, and even stops at that
// very directory because it holds an inlet.yaml), but not the project's
// inlet.yaml: loadServiceConfig (cmd/inlet/common.go) reads ./inlet.yaml
// only and falls back to the embedded dev defaults. So the command mixes
// the project's database and ingress with the embedded configuration:
// "inlet send stripe" signs with the public dev secret and the project's
// ingress answers 401 signature_mismatch (exit 1, nothing says which
// config was used), and "inlet events verify" re-checks the project's
// intact events with the dev secrets and reports each as a signature
// mismatch (exit 1: a false tamper alarm). docs/operations.md promises that
// every command run "from a directory below it" uses inlet dev's database,
// "with or without an inlet.yaml"; README step 5 says every command run
// from the directory finds it.
// Setup: TOP/inlet.yaml (source stripe with the project's own secret,
// handler log); inlet dev on it (real PostgreSQL, real HTTP), so
// TOP/.inlet/ingress_url; later TOP/.inlet/database_url as inlet dev writes
// it. The same commands run in TOP (control) and in TOP/a/b.
// Expected: from TOP/a/b the same results as from TOP: the send stored
// (200), the verify "1 verified, 0 failed".
// Observed: from TOP both pass; from TOP/a/b "401 Unauthorized ...
// signature_mismatch" (exit 1), and verify "checked 1 event: 0 verified,
// 1 failed" with signature_mismatch (exit 1).
// Fixed: when --config is the default and ./inlet.yaml is missing,
// loadServiceConfig reads the project's inlet.yaml (projectConfig: that of
// the nearest directory holding an inlet.yaml or a .git, where findDevFile
// stops), as git reads its repository's config, and names it where the
// commands say where their configuration came from.
func TestSubdirectoryUsesTheProjectsConfig(t *testing.T) {
	clearDevEnv(t)
	for _, v := range []string{"GITHUB_WEBHOOK_SECRET", "ACME_WEBHOOK_SECRET"} {
		t.Setenv(v, "")
	}
	dbURL := pgtest.NewDatabase(t)
	t.Setenv("DATABASE_URL", dbURL) // inlet dev on it; unset below, where .inlet/database_url names it
	top := t.TempDir()
	sub := filepath.Join(top, "a", "b")
	if err := os.MkdirAll(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	port, err := freeport.Pick()
	if err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(top, "inlet.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`ingress:
  listen: "127.0.0.1:%d"
  metrics_listen: "off"
sources:
  - name: stripe
    type: stripe
    secrets: ["whsec_review231_the_projects_own_secret"]
consumer:
  handlers:
    - name: log
      type: log
`, port)), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Chdir(top)
	stop := devInProcess(t, "--config", cfg, "--data-dir", filepath.Join(top, devDataDir), "--admin-listen", "off")

	// Control: in the project's directory.
	if out, errOut, err := runInletIn(t, top, "send", "stripe", "--id", "evt_review231_top"); err != nil {
		t.Fatalf("inlet send stripe in the project's directory: %v\n%s%s", err, out, errOut)
	}
	// A directory below it: the same ingress (found through .inlet/ingress_url).
	out, errOut, err := runInletIn(t, sub, "send", "stripe", "--id", "evt_review231_sub")
	if err != nil || !strings.Contains(out, `"stored"`) {
		t.Errorf("inlet send stripe in %s (a subdirectory of the project whose inlet dev it posts to): %v; want it stored as from %s\nstdout: %s\nstderr: %s",
			sub, err, top, out, errOut)
	}
	if err := stop(); err != nil {
		t.Fatalf("inlet dev: %v", err)
	}

	// inlet events verify, the database found through .inlet/database_url
	// (what inlet dev writes when it starts its own PostgreSQL).
	t.Setenv("DATABASE_URL", "")
	if err := os.WriteFile(filepath.Join(top, devDataDir, "database_url"), []byte(dbURL+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, errOut, err := runInletIn(t, top, "events", "verify", "--since", "1h"); err != nil || !strings.Contains(out, "0 failed") {
		t.Fatalf("inlet events verify in the project's directory: %v\n%s%s", err, out, errOut)
	}
	out, errOut, err = runInletIn(t, sub, "events", "verify", "--since", "1h")
	if err != nil || !strings.Contains(out, "0 failed") {
		t.Errorf("inlet events verify in %s, on the project's database: %v; want what it says in %s (0 failed): the project's intact events reported as altered\nstdout: %s\nstderr: %s",
			sub, err, top, out, errOut)
	}
}

// TestDevOnAConfigFileSealsByDefault (review helper-231, fixed).
// Defect: docs/configuration.md gives inlet dev its own defaults:
// "audit.seal_every | 0 (10s in inlet dev)" (also silence.check_every "1m
// (10s in inlet dev)", admin.listen "— (127.0.0.1:8084 in inlet dev)"), and
// inlet.example.yaml says "Default 0 (10s in inlet dev)". They hold only on
// the embedded defaults (inletyaml/dev.yaml sets them); with an inlet.yaml
// (what the README and the example invite a newcomer to write) runDev
// (cmd/inlet/dev.go) takes WithDefaults' service defaults: seal_every 0, so
// inlet dev never seals. Nothing says so; inlet audit verify shows every
// event "not yet sealed", and inlet retention, which drops only sealed
// periods, keeps everything.
// Setup: a minimal inlet.yaml (one stripe source, handler log, no audit:
// section); inlet dev on it over a real PostgreSQL; one signed webhook
// through inlet send; audit_checkpoints polled.
// Expected: a checkpoint within about grace (5s) + 10s; the test allows 90s.
// Observed: no checkpoint after 90s (audit.seal_every stays 0).
// Fixed: runDev gives a config file inlet dev's documented defaults for the
// keys it leaves out (inletyaml.WithDevDefaults: audit.seal_every and
// silence.check_every 10s, admin.listen 127.0.0.1:8084 with the development
// token when admin.token is unset too), before applyDevListeners; a key the
// file sets keeps its value, 0 or "" included.
func TestDevOnAConfigFileSealsByDefault(t *testing.T) {
	clearDevEnv(t)
	dbURL := pgtest.NewDatabase(t)
	t.Setenv("DATABASE_URL", dbURL)
	dir := t.TempDir()
	t.Chdir(dir)
	port, err := freeport.Pick()
	if err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "inlet.yaml")
	if err := os.WriteFile(cfg, []byte(`sources:
  - name: stripe
    type: stripe
    secrets: ["whsec_review231_minimal_config"]
consumer:
  handlers:
    - name: log
      type: log
`), 0o600); err != nil {
		t.Fatal(err)
	}
	devInProcess(t, "--config", cfg, "--data-dir", filepath.Join(dir, devDataDir), "--listen", "127.0.0.1:"+strconv.Itoa(port),
		"--metrics-listen", "off", "--admin-listen", "off")
	if out, errOut, err := runInletIn(t, dir, "send", "stripe", "--config", cfg); err != nil {
		t.Fatalf("inlet send stripe: %v\n%s%s", err, out, errOut)
	}
	conn, err := pgx.Connect(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	deadline := time.Now().Add(90 * time.Second)
	var checkpoints int
	for {
		if err := conn.QueryRow(context.Background(), `SELECT count(*) FROM webhook_ingress.audit_checkpoints`).Scan(&checkpoints); err != nil {
			t.Fatal(err)
		}
		if checkpoints > 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	if checkpoints == 0 {
		t.Errorf("inlet dev on an inlet.yaml without an audit: section sealed nothing in 90s after a webhook; docs/configuration.md: audit.seal_every defaults to 10s in inlet dev")
	}
}

// Without --config a command below a project's directory reads the
// project's inlet.yaml and says so, and the search stops where findDevFile
// stops: a directory holding a .git and no inlet.yaml is a project of its
// own, on the embedded defaults (review helper-231).
func TestProjectConfigStopsAtTheProjectRoot(t *testing.T) {
	clearDevEnv(t)
	top, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"a/b", "repo/c", ".git"} {
		if err := os.MkdirAll(filepath.Join(top, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(top, "repo", ".git"), 0o755); err != nil {
		t.Fatal(err)
	}
	project := filepath.Join(top, "inlet.yaml")
	if err := os.WriteFile(project, []byte("sources:\n  - name: projects_own\n    type: stripe\n    secrets: [whsec_project_config]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Chdir(filepath.Join(top, "a", "b"))
	cfg, from, err := loadConfig(defaultConfigPath, inletyaml.Dev)
	if _, ok := cfg.Source("projects_own"); err != nil || from != project || !ok {
		t.Errorf("below the project: config from %q (err %v, its source there: %v); want %s", from, err, ok, project)
	}
	if _, from, err := loadServiceConfig(defaultConfigPath, config.IngressService, nil); err != nil || from != project {
		t.Errorf("a service below the project: config from %q (err %v); want %s", from, err, project)
	}
	if out, err := runInlet(t, "config", "check"); err != nil || out != project+": ok\n" {
		t.Errorf("inlet config check below the project: %v, %q; want %s checked", err, out, project)
	}
	t.Chdir(filepath.Join(top, "repo", "c"))
	if _, from, err := loadConfig(defaultConfigPath, inletyaml.Dev); err != nil || from != "embedded defaults" {
		t.Errorf("in a repository of its own inside the project: config from %q (err %v); want the embedded defaults", from, err)
	}
	if _, _, err := loadServiceConfig(defaultConfigPath, config.IngressService, nil); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("a service in a repository of its own without inlet.yaml: %v; want the file missing", err)
	}
}
