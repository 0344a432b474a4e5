package tests

import (
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/internal/pgtest"
)

// A first-time operator starts `inlet dev`, sees it initialising PostgreSQL
// and presses Ctrl-C at once (wrong terminal, wrong port, second thoughts).
// `inlet dev --help` and docs/operations.md promise: "Interrupted while
// starting, it stops what started and exits 0". The next `inlet dev` must
// then start normally.
//
// (review helper-184, fixed; this describes the code before the fix)
// The interrupt kills initdb (SIGKILL, from exec.CommandContext) after it
// wrote <data>/pg/data/PG_VERSION but before its bootstrap finished.
// internal/pgcluster/cluster.go initdb took PG_VERSION as the sign of a
// finished cluster, skipped initdb on the next start and started the
// half-made cluster: every later `inlet dev` failed with "postgres did not
// start ... could not find the database system" (or "database "postgres"
// does not exist"), naming nothing to do about it, until the operator
// deleted .inlet/. Now initdb makes the cluster in pg/data.partial, renamed
// to pg/data once it finished.
func TestDevInterruptedDuringInitdbStartsAgain(t *testing.T) {
	t.Parallel()
	data := filepath.Join(pgtest.TempDir(t), ".inlet")
	t.Cleanup(func() { killOrphans(data) })

	p := start(t, devEnv(t), "dev", "--data-dir", data)
	// initdb is running: it has written PG_VERSION of the cluster it makes.
	version := filepath.Join(data, "pg", "data.partial", "PG_VERSION")
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if _, err := os.Stat(version); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("initdb wrote no %s within 2 minutes", version)
		}
		select {
		case <-p.done:
			t.Fatalf("inlet dev exited (%v) before initdb wrote PG_VERSION; stderr:\n%s", p.err, p.errOut())
		case <-time.After(2 * time.Millisecond):
		}
	}
	// The operator's Ctrl-C while initdb is running.
	_ = p.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-p.done:
	case <-time.After(time.Minute):
		t.Fatal("inlet dev did not exit within a minute of Ctrl-C while starting")
	}
	if p.err != nil {
		t.Errorf("inlet dev interrupted while starting: %v, want exit 0 (documented)", p.err)
	}
	if _, err := os.Stat(filepath.Join(data, "pg", "data")); err == nil {
		t.Logf("initdb finished before the interrupt reached it (pg/data exists): the restart below proves less")
	}

	env := devEnv(t)
	q := start(t, env, "dev", "--data-dir", data)
	q.waitOutput("Ctrl-C stops.", 3*time.Minute)
	out, errOut, code := runInlet(t, cleanEnv(), "send", "github", "--id", "after-the-interrupt", "--url", "http://"+devWebhookAddr(env))
	if code != 0 || !strings.Contains(out, `"stored"`) {
		t.Errorf("send after the restart: exit %d\n%s%s", code, out, errOut)
	}
	if err := q.stop(); err != nil {
		t.Errorf("inlet dev after SIGTERM: %v", err)
	}
}

// A data directory that an earlier start left damaged (here: what an initdb
// of the code before the fix above left when killed, PG_VERSION and nothing
// else) makes `inlet dev` fail: its one-line reason names where the data is
// and that deleting the data directory starts over, and doing so does.
func TestDevStartFailingOnExistingDataSaysHowToStartOver(t *testing.T) {
	t.Parallel()
	data := filepath.Join(pgtest.TempDir(t), ".inlet")
	t.Cleanup(func() { killOrphans(data) })
	pgData := filepath.Join(data, "pg", "data")
	if err := os.MkdirAll(filepath.Dir(pgData), 0o755); err != nil { // the postgres user enters .inlet/ (as root)
		t.Fatal(err)
	}
	if err := os.Mkdir(pgData, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(pgData, "PG_VERSION"), []byte("16\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 { // the cluster's files are the postgres user's, as initdb left them
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Fatal(err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		for _, p := range []string{filepath.Dir(pgData), pgData, filepath.Join(pgData, "PG_VERSION")} {
			if err := os.Chown(p, uid, gid); err != nil {
				t.Fatal(err)
			}
		}
	}

	p := start(t, devEnv(t), "dev", "--data-dir", data)
	select {
	case <-p.done:
	case <-time.After(2 * time.Minute):
		_ = p.stop()
		t.Fatalf("inlet dev on a damaged cluster still runs after 2 minutes; stderr:\n%s", p.errOut())
	}
	errOut := p.errOut()
	if p.err == nil {
		t.Fatalf("inlet dev on a damaged cluster exited 0; stderr:\n%s", errOut)
	}
	for _, want := range []string{"its data is in " + pgData, "delete " + data + " to start over"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("inlet dev on a damaged cluster: stderr lacks %q:\n%s", want, errOut)
		}
	}

	if err := os.RemoveAll(data); err != nil {
		t.Fatal(err)
	}
	q := start(t, devEnv(t), "dev", "--data-dir", data)
	q.waitOutput("Ctrl-C stops.", 3*time.Minute)
	if err := q.stop(); err != nil {
		t.Errorf("inlet dev after SIGTERM: %v", err)
	}
}

// README: "Delete `.inlet/` to start over." (and `inlet dev --help`: "Delete
// the data directory to start over."). As root in a directory the postgres
// user cannot enter (root's own home, /root, is 0700: the usual place a root
// operator clones into), inlet dev keeps its cluster under /var/tmp instead.
//
// (review helper-184, fixed; this describes the code before the fix)
// That directory was /var/tmp/inlet-dev-<sha256 of the path>/pg
// (cmd/inlet/dev.go startDevPostgreSQL, the ErrUnreachableDir fallback),
// which deleting .inlet/ left in place and nothing under .inlet/ recorded:
// the next inlet dev started on the old cluster, with every event stored
// before. A delivery id sent before was then answered "duplicate", not
// stored, and `inlet events list` still listed the old events. Now the
// directory is named by a random id in .inlet/cluster_id, so deleting
// .inlet/ starts a new cluster, and the start-up warning names the old one.
func TestDevDeletingDataDirStartsOverAsRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the /var/tmp fallback is root's")
	}
	t.Parallel()
	project := t.TempDir() // 0700 at its top, as /root: the postgres user cannot enter it
	data := filepath.Join(project, ".inlet")
	var fallbacks []string
	fallbackOf := func() string {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(data, "cluster_id"))
		if err != nil {
			t.Fatalf("inlet dev kept its cluster in /var/tmp without naming it in .inlet/cluster_id: %v", err)
		}
		dir := filepath.Join("/var/tmp", "inlet-dev-"+strings.TrimSpace(string(b)))
		fallbacks = append(fallbacks, dir)
		return dir
	}
	t.Cleanup(func() {
		for _, dir := range fallbacks {
			killOrphans(dir)
			_ = os.RemoveAll(dir)
		}
	})

	send := func() (string, *proc) {
		t.Helper()
		env := devEnv(t)
		p := startIn(t, project, inletBin, env, "dev") // go run ./cmd/inlet dev, from the project
		p.waitOutput("Ctrl-C stops.", 3*time.Minute)
		fallbackOf()
		out, errOut, code := runInlet(t, cleanEnv(), "send", "github", "--id", "review-184-delivery", "--url", "http://"+devWebhookAddr(env))
		if code != 0 {
			t.Fatalf("send: exit %d\n%s%s", code, out, errOut)
		}
		if err := p.stop(); err != nil {
			t.Fatalf("inlet dev after SIGTERM: %v", err)
		}
		return out, p
	}
	out, p := send()
	if !strings.Contains(out, `"stored"`) {
		t.Fatalf("first delivery not stored:\n%s", out)
	}
	first := fallbacks[0]
	if !strings.Contains(p.errOut(), first) {
		t.Errorf("the start-up warning does not name %s, where the data is:\n%s", first, p.errOut())
	}
	// The README's way to start over.
	if err := os.RemoveAll(data); err != nil {
		t.Fatal(err)
	}
	out, p = send()
	if !strings.Contains(out, `"stored"`) {
		t.Errorf("after deleting .inlet/ (\"to start over\") the same delivery id is not stored anew: the old cluster "+
			"under %s was used again (now %s)\n%s", first, fallbacks[1], out)
	}
	if !strings.Contains(p.errOut(), "rm -rf "+first) {
		t.Errorf("the start after deleting .inlet/ does not say how to remove the old cluster %s:\n%s", first, p.errOut())
	}
}
