package tests

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/internal/pgtest"
)

// devWebhookAddr is the INLET_LISTEN of an environment made by devEnv.
func devWebhookAddr(env []string) string {
	for _, kv := range env {
		if a, ok := strings.CutPrefix(kv, "INLET_LISTEN="); ok {
			return a
		}
	}
	return ""
}

// TestDevStartsAgainAfterItsProcessIsKilled: an inlet dev killed without
// its shutdown leaves its PostgreSQL running; the next one stops it and
// starts on the same data (StopLeftover, under the data directory's lock).
//
// Regression test (review helper-115; fixed: the text describes the
// behaviour before the fix). An inlet dev that dies without its shutdown (kill -9, the OOM
// killer, a panic in any goroutine, a closed SSH session's SIGKILL) leaves
// its local PostgreSQL running (it runs in a process group of its own), and
// every later `inlet dev` from the same directory then fails, forever, with
// a 3,000-character dump of the server log ("postgres did not start ...
// server exited ... FATAL: lock file "postmaster.pid" already exists"). The
// first-time user's only way out is to find and kill that postgres by hand,
// or to follow the README's "Delete .inlet/ to start over", which loses
// every stored event AND leaves the orphan running beside a new (second)
// PostgreSQL. docs/operations.md says the local PostgreSQL "listens on the
// same port at every start ... when another process has taken that port it
// picks another": here the "other process" is inlet dev's own leftover
// server, so it picks another port and then cannot start on the locked
// data directory.
//
// Expected: the next inlet dev starts, with the events stored before the
// crash, and exactly one PostgreSQL serves the data directory.
//
// Root cause: cmd/inlet/dev.go startDevPostgreSQL (pgcluster.New +
// cluster.Start) never looks at <data>/pg/data/postmaster.pid;
// internal/pgcluster/cluster.go Start (pickPort, then waitReady ->
// "server exited" + logTail).
func TestDevStartsAgainAfterItsProcessIsKilled(t *testing.T) {
	t.Parallel()
	data := pgtest.TempDir(t)
	t.Cleanup(func() { killOrphans(data) })

	env := devEnv(t)
	p := start(t, env, "dev", "--data-dir", data)
	p.waitOutput("Ctrl-C stops.", 3*time.Minute)
	if out, errOut, code := runInlet(t, cleanEnv(), "send", "github", "--id", "before-the-crash", "--url", "http://"+devWebhookAddr(env)); code != 0 || !strings.Contains(out, `"stored"`) {
		t.Fatalf("send: exit %d\n%s%s", code, out, errOut)
	}
	// The process dies as a crash or kill -9 would end it.
	_ = p.cmd.Process.Kill()
	<-p.done

	env2 := devEnv(t)
	q := start(t, env2, "dev", "--data-dir", data)
	q.waitOutput("Ctrl-C stops.", 3*time.Minute) // fails here: q exits 1 with the server log dump

	out, errOut, code := runInlet(t, cleanEnv("DATABASE_URL="+devURL(t, data)), "events", "list")
	if code != 0 || !strings.Contains(out, "before-the-crash") {
		t.Errorf("the event stored before the crash is not listed after the restart: exit %d\n%s%s", code, out, errOut)
	}
	if pids := postmastersOf(data); len(pids) != 1 {
		t.Errorf("PostgreSQL servers of %s after the restart: %v, want exactly one", data, pids)
	}
	if err := q.stop(); err != nil {
		t.Fatalf("inlet dev after SIGTERM: %v", err)
	}
}

// TestSecondDevInSameDirectorySaysSo: a second inlet dev on the data
// directory of a running one is refused in one line naming the first.
//
// Regression test (review helper-115; fixed by lockDataDir: the text
// describes the behaviour before the fix). A second `inlet dev` from the directory of one still running
// (a second terminal, or an earlier run forgotten in a tab) moved to other
// ports as the first one's "already in use ... --port-base N moves every
// listener of inlet dev" message suggests, fails with a single line of
// ~3,000 characters: the tail of the PostgreSQL server log, with the cause
// ("lock file postmaster.pid already exists ... Is another postmaster
// running") at its very end. Nothing says that another inlet dev is using
// this directory, nor which one.
//
// Expected: one short line saying another inlet dev (its pid) runs from
// this data directory, e.g. "inlet: another inlet dev (pid 123) is using
// .inlet: stop it first, or use --data-dir DIR".
//
// Root cause: cmd/inlet/dev.go startDevPostgreSQL has no lock on the data
// directory; internal/pgcluster/cluster.go:255 wraps the whole log tail
// into the error.
func TestSecondDevInSameDirectorySaysSo(t *testing.T) {
	t.Parallel()
	data := pgtest.TempDir(t)
	t.Cleanup(func() { killOrphans(data) })

	p := start(t, devEnv(t), "dev", "--data-dir", data)
	p.waitOutput("Ctrl-C stops.", 3*time.Minute)

	_, errOut, code := runInlet(t, devEnv(t), "dev", "--data-dir", data)
	line := strings.TrimSpace(errOut)
	if i := strings.LastIndex(line, "\ninlet: "); i >= 0 {
		line = line[i+1:] // the reason, after any log lines
	}
	pid := strconv.Itoa(p.cmd.Process.Pid)
	if code != 1 || len(line) > 300 || strings.Contains(line, "LOG:") || !strings.Contains(line, "inlet dev") || !strings.Contains(line, pid) {
		t.Errorf("a second inlet dev on %s while inlet dev (pid %s) runs: exit %d, want 1 and one short line naming the running inlet dev; got %d characters:\n%s",
			data, pid, code, len(line), line)
	}
	// The first one is unharmed.
	if pids := postmastersOf(data); len(pids) != 1 {
		t.Errorf("PostgreSQL servers of %s: %v, want exactly one", data, pids)
	}
	if err := p.stop(); err != nil {
		t.Fatalf("the first inlet dev after SIGTERM: %v", err)
	}
}

// TestConfigCheckRefusesAListenAddressNoServiceCanBind: config check refuses
// a listen address no service can bind, naming the key.
//
// Regression test (review helper-115; fixed by config.CheckListen: the text
// describes the behaviour before the fix). `inlet config check` ("check the file as every service checks it
// when it starts ... settings out of range") passes listen addresses no
// service can bind: `listen: 8080` (only the port, the commonest slip),
// "localhost:80800" (a port out of range). `inlet config check` prints
// "inlet.yaml: ok" and exits 0, then `inlet dev` / `inlet ingress` fail at
// start ("listen tcp: address 8080: missing port in address; stop what
// listens there, ..." — inlet dev even tells the user to stop a process
// that does not exist). The same holds for ingress.metrics_listen,
// admin.listen, streamer.health_listen and consumer.health_listen.
//
// Expected: exit 1 with "FILE:LINE: ingress.listen: ..." for each.
//
// Root cause: ingress/section.go Validate (line ~102) checks no listen
// address (nor do the other sections' Validate for theirs).
func TestConfigCheckRefusesAListenAddressNoServiceCanBind(t *testing.T) {
	t.Parallel()
	for _, listen := range []string{`8080`, `"localhost:80800"`} {
		dir := t.TempDir()
		writeFile(t, dir, "inlet.yaml", fmt.Sprintf(`ingress:
  listen: %s
  metrics_listen: "127.0.0.1:0"
sources:
  - name: stripe
    type: stripe
    secrets: ["whsec_a_secret_of_my_own"]
consumer:
  handlers:
    - name: log
      type: log
`, listen))
		out, errOut, code := runInletIn(t, dir, cleanEnv(), "config", "check")
		if code != 1 || !strings.Contains(out, "inlet.yaml:2: ingress.listen") {
			t.Errorf("inlet config check with ingress.listen %s: exit %d, want 1 and inlet.yaml:2: ingress.listen: ...\n%s%s", listen, code, out, errOut)
		}
	}
}
