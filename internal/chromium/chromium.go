package chromium

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// ErrNotFound means no Chromium executable was found and none could be
// installed. Its message says how to install one.
var ErrNotFound = errors.New("no Chromium executable found")

// names are the executables looked for on PATH, in order.
var names = []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome", "headless-shell"}

// Options tunes Find.
type Options struct {
	// Install allows `apt-get install chromium` when nothing is found and the
	// process is root. Defaults to false.
	Install bool
	// Logger receives progress of an install. Defaults to slog.Default().
	Logger *slog.Logger
}

// Find returns the path of a Chromium executable: $INLET_CHROMIUM when set,
// else the first of chromium, chromium-browser, google-chrome (and a few
// other names) on PATH; then, if allowed and root, it installs Debian's
// chromium package and looks again.
func Find(ctx context.Context, opts Options) (string, error) {
	if p, err := look(); p != "" || err != nil {
		return p, err
	}
	if !opts.Install || os.Geteuid() != 0 {
		return "", hint()
	}
	if _, err := exec.LookPath("apt-get"); err != nil {
		return "", hint()
	}
	if err := aptInstall(ctx, opts.Logger); err != nil {
		return "", fmt.Errorf("%w; installing it with apt-get failed: %v", ErrNotFound, err)
	}
	if p, err := look(); p != "" || err != nil {
		return p, err
	}
	return "", hint()
}

func hint() error {
	return fmt.Errorf("%w: install Chromium (Debian/Ubuntu: apt-get install chromium; macOS: brew install --cask chromium), "+
		"or set INLET_CHROMIUM to its executable", ErrNotFound)
}

// look returns the first executable found, or an error when $INLET_CHROMIUM
// names one that is not there (a typo should not silently pick another).
func look() (string, error) {
	if p := os.Getenv("INLET_CHROMIUM"); p != "" {
		if _, err := exec.LookPath(p); err != nil {
			return "", fmt.Errorf("INLET_CHROMIUM=%s: %w", p, err)
		}
		return p, nil
	}
	for _, n := range names {
		if p, err := exec.LookPath(n); err == nil {
			return p, nil
		}
	}
	return "", nil
}

// packages are what aptInstall installs: the browser and a font, so that
// screenshots show text. Recommends are left out: chromium-sandbox is of no
// use to a root process, which must run with --no-sandbox anyway.
var packages = []string{"chromium", "fonts-liberation"}

// aptInstall installs Debian's chromium. Several test binaries may get here
// at once, so it holds a machine-wide lock and looks again once it has it;
// apt itself may be busy installing PostgreSQL for the test harness, so it
// waits for apt's locks too.
func aptInstall(ctx context.Context, logger *slog.Logger) error {
	if logger == nil {
		logger = slog.Default()
	}
	lock, err := os.OpenFile(filepath.Join(os.TempDir(), "inlet-chromium-install.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return fmt.Errorf("lock install: %w", err)
	}
	// Closing lock (deferred above) releases the flock.
	if p, _ := look(); p != "" {
		return nil
	}
	logger.Info("Chromium not found; installing Debian's chromium package with apt-get (one time)")
	for _, args := range [][]string{
		{"update", "-q"},
		append([]string{"install", "-y", "-q", "--no-install-recommends"}, packages...),
	} {
		if err := aptGet(ctx, args); err != nil {
			return err
		}
	}
	return nil
}

// aptGet runs apt-get with args, waiting (up to ten minutes) while another
// apt or dpkg holds its locks.
func aptGet(ctx context.Context, args []string) error {
	deadline := time.Now().Add(10 * time.Minute)
	for {
		cmd := exec.CommandContext(ctx, "apt-get", append([]string{"-o", "DPkg::Lock::Timeout=600"}, args...)...)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		out, err := cmd.CombinedOutput()
		if err == nil {
			return nil
		}
		// apt-get update has no lock timeout of its own.
		if strings.Contains(string(out), "Could not get lock") && time.Now().Before(deadline) {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(2 * time.Second):
				continue
			}
		}
		tail := string(out)
		if len(tail) > 2000 {
			tail = tail[len(tail)-2000:]
		}
		return fmt.Errorf("apt-get %s: %w\n%s", args[0], err, tail)
	}
}
