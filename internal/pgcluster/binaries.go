package pgcluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
)

// ErrNoBinaries means no PostgreSQL server binaries were found and none could be
// installed. Its message says how to install them.
var ErrNoBinaries = errors.New("no PostgreSQL server binaries found")

// serverTools are the programs a cluster needs, all from one bindir.
var serverTools = []string{"initdb", "pg_ctl", "postgres"}

// FindOptions tunes FindBinaries.
type FindOptions struct {
	// Install allows `apt-get install postgresql` when nothing is found and the
	// process is root. Defaults to false.
	Install bool
	// Logger receives progress of an install. Defaults to slog.Default().
	Logger *slog.Logger
}

// FindBinaries returns the directory holding initdb, pg_ctl and postgres. It
// looks, in order, at $INLET_PG_BINDIR, PATH, `pg_config --bindir`, and
// /usr/lib/postgresql/<newest>/bin and other usual places; then, if allowed and
// root, installs Debian's postgresql package.
func FindBinaries(ctx context.Context, opts FindOptions) (string, error) {
	if dir, ok := lookBinaries(); ok {
		return dir, nil
	}
	if !opts.Install || os.Geteuid() != 0 {
		return "", installHint()
	}
	if _, err := exec.LookPath("apt-get"); err != nil {
		return "", installHint()
	}
	if err := aptInstall(ctx, opts.Logger); err != nil {
		return "", fmt.Errorf("%w; installing with apt-get failed: %v", ErrNoBinaries, err)
	}
	if dir, ok := lookBinaries(); ok {
		return dir, nil
	}
	return "", installHint()
}

func installHint() error {
	return fmt.Errorf("%w: install PostgreSQL (Debian/Ubuntu: apt-get install postgresql; macOS: brew install postgresql), "+
		"set INLET_PG_BINDIR to the directory holding initdb, or set DATABASE_URL to an existing server", ErrNoBinaries)
}

func hasTools(dir string) bool {
	for _, t := range serverTools {
		st, err := os.Stat(filepath.Join(dir, t)) //nolint:gosec // G703: dir is the operator's INLET_PG_BINDIR or a PATH entry; Stat only
		if err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
			return false
		}
	}
	return true
}

func lookBinaries() (string, bool) {
	var candidates []string
	if d := os.Getenv("INLET_PG_BINDIR"); d != "" {
		candidates = append(candidates, d)
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		candidates = append(candidates, filepath.Dir(p))
		if real, err := filepath.EvalSymlinks(p); err == nil {
			candidates = append(candidates, filepath.Dir(real))
		}
	}
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		candidates = append(candidates, strings.TrimSpace(string(out)))
	}
	candidates = append(candidates, versionedDirs("/usr/lib/postgresql/*/bin")...)
	candidates = append(candidates, versionedDirs("/usr/pgsql-*/bin")...)
	candidates = append(candidates, "/usr/local/pgsql/bin", "/opt/homebrew/bin", "/usr/local/bin", "/usr/bin")
	for _, d := range candidates {
		if hasTools(d) {
			return d, true
		}
	}
	return "", false
}

// versionedDirs expands pattern and orders the matches newest major version first.
func versionedDirs(pattern string) []string {
	dirs, _ := filepath.Glob(pattern)
	// The version is the directory holding bin/: /usr/lib/postgresql/16/bin,
	// /usr/pgsql-16/bin.
	version := func(d string) int {
		v := strings.TrimPrefix(filepath.Base(filepath.Dir(d)), "pgsql-")
		n, _ := strconv.Atoi(strings.SplitN(v, ".", 2)[0])
		return n
	}
	sort.SliceStable(dirs, func(i, j int) bool { return version(dirs[i]) > version(dirs[j]) })
	return dirs
}

// aptInstall installs Debian's PostgreSQL server without its default cluster.
// Several test binaries may get here at once, so it holds a machine-wide lock
// and looks again once it has it.
func aptInstall(ctx context.Context, logger *slog.Logger) error {
	if logger == nil {
		logger = slog.Default()
	}
	lock, err := os.OpenFile(filepath.Join(os.TempDir(), "inlet-pg-install.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return fmt.Errorf("lock install: %w", err)
	}
	// Closing lock (deferred above) releases the flock.
	if _, ok := lookBinaries(); ok {
		return nil
	}
	logger.Info("PostgreSQL server binaries not found; installing Debian's postgresql package with apt-get (one time)")
	// Only the binaries: no "main" cluster of the distribution's own.
	if err := os.MkdirAll("/etc/postgresql-common/createcluster.d", 0o755); err == nil { //nolint:gosec // G301: a system configuration directory, world-readable like the rest of /etc/postgresql-common
		_ = os.WriteFile("/etc/postgresql-common/createcluster.d/inlet.conf", []byte("create_main_cluster = false\n"), 0o644) //nolint:gosec // G306: a system configuration file, world-readable like the rest of /etc/postgresql-common
	}
	env := append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	for _, args := range [][]string{
		{"update", "-q"},
		{"install", "-y", "-q", "--no-install-recommends", "postgresql", "postgresql-contrib"},
	} {
		cmd := exec.CommandContext(ctx, "apt-get", args...) //nolint:gosec // G204: apt-get with the fixed arguments listed above
		cmd.Env = env
		if out, err := cmd.CombinedOutput(); err != nil {
			tail := string(out)
			if len(tail) > 2000 {
				tail = tail[len(tail)-2000:]
			}
			return fmt.Errorf("apt-get %s: %w\n%s", args[0], err, tail)
		}
	}
	return nil
}
