package tests

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/internal/freeport"
	"github.com/inlet-dev/inlet/internal/pgtest"
)

// The embedded defaults' admin token (inlet-dev-admin-token) is public: it
// is in inletyaml/dev.yaml and printed by every inlet dev. inlet dev refuses
// to serve the admin API (raw bodies, replays) beyond loopback with it, and
// names admin.token; with a token of one's own it starts. (Found by a
// review: INLET_ADMIN_LISTEN=0.0.0.0:PORT served it with the public token,
// without a word.)
func TestDevRefusesThePublicAdminTokenBeyondLoopback(t *testing.T) {
	t.Parallel()
	p, err := freeport.Pick()
	if err != nil {
		t.Fatal(err)
	}
	env := cleanEnv("INLET_LISTEN="+freeAddr(t), "INLET_METRICS_LISTEN="+freeAddr(t), "INLET_ADMIN_LISTEN=0.0.0.0:"+strconv.Itoa(p))
	_, errOut, code := runInletIn(t, pgtest.TempDir(t), env, "dev", "--data-dir", pgtest.TempDir(t))
	if code == 0 || !strings.Contains(errOut, "admin.token") {
		t.Errorf("inlet dev with the admin API on 0.0.0.0 and the public token: exit %d, want a refusal naming admin.token; stderr:\n%s", code, errOut)
	}
}

// As root in a directory the postgres user cannot enter, inlet dev puts its
// cluster under /var/tmp/inlet-dev-ID/pg. ID is random now (cluster_id), but
// a data directory of an earlier version (its database_url there, no
// cluster_id) takes up the directory named after its path, a predictable
// name in a world-writable directory. It uses that directory only when it
// is root's own, writable by no one else: another account that made it
// first, with pg a link to a root-only directory holding what looks like a
// cluster, gets nothing given away. (Found by a review: root chowned the
// link's target to the postgres user and initdb'd a cluster inside it.)
func TestDevVarTmpFallbackRefusesAnotherUsersDirectory(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the /var/tmp fallback is root's")
	}
	nobody, err := user.Lookup("nobody")
	if err != nil {
		t.Skip("no nobody account")
	}
	uid, _ := strconv.Atoi(nobody.Uid)
	gid, _ := strconv.Atoi(nobody.Gid)
	// A data directory the postgres user cannot reach (t.TempDir is 0700).
	data := filepath.Join(t.TempDir(), "project", ".inlet")
	abs, _ := filepath.Abs(filepath.Join(data, "pg"))
	sum := sha256.Sum256([]byte(abs))
	planted := filepath.Join("/var/tmp", "inlet-dev-"+hex.EncodeToString(sum[:6]))
	victim := filepath.Join(pgtest.TempDir(t), "root-only")
	if err := os.MkdirAll(filepath.Join(victim, "data"), 0o700); err != nil {
		t.Fatal(err)
	}
	// What makes the upgrade take the path-named directory up: a cluster
	// there, and a data directory of the earlier version.
	if err := os.WriteFile(filepath.Join(victim, "data", "PG_VERSION"), []byte("15\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(data, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(data, "database_url"), []byte("postgres://localhost/inlet\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// What the other account does, beforehand.
	if err := os.Mkdir(planted, 0o777); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(planted) })
	if err := os.Chmod(planted, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(victim, filepath.Join(planted, "pg")); err != nil {
		t.Fatal(err)
	}
	_ = os.Lchown(filepath.Join(planted, "pg"), uid, gid)
	if err := os.Chown(planted, uid, gid); err != nil {
		t.Fatal(err)
	}

	d := start(t, devEnv(t), "dev", "--data-dir", data)
	t.Cleanup(func() {
		_ = d.stop()
		killOrphans(victim)
		killOrphans(planted)
		// A fallback of its own, if it made one.
		if id, err := os.ReadFile(filepath.Join(data, "cluster_id")); err == nil {
			own := filepath.Join("/var/tmp", "inlet-dev-"+strings.TrimSpace(string(id)))
			if own != planted {
				killOrphans(own)
				os.RemoveAll(own)
			}
		}
	})
	deadline := time.Now().Add(3 * time.Minute)
	for time.Now().Before(deadline) {
		if strings.Contains(d.out(), "Ctrl-C stops.") {
			break
		}
		select {
		case <-d.done:
			deadline = time.Now()
		case <-time.After(200 * time.Millisecond):
		}
	}
	st, err := os.Stat(victim)
	if err != nil {
		t.Fatal(err)
	}
	owner := int(st.Sys().(*syscall.Stat_t).Uid)
	_, initdbInside := os.Stat(filepath.Join(victim, "data", "global"))
	_, started := os.Stat(filepath.Join(victim, "data", "postmaster.pid"))
	if owner != 0 || initdbInside == nil || started == nil {
		t.Errorf("inlet dev (root) followed %s/pg, a link another account planted, to %s: that root-only directory is now owned by uid %d "+
			"(a cluster made inside: %v, started: %v); stderr:\n%s", planted, victim, owner, initdbInside == nil, started == nil, d.errOut())
	}
}
