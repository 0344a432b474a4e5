package pgtest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/inlet-dev/inlet/internal/pgcluster"
	"github.com/inlet-dev/inlet/schema"
)

// A data directory with the migrated template is kept between test binaries
// (go test runs one per package, each with its own cluster): initdb and the
// migrations ran once per package before, a few seconds each on a loaded
// machine; now a copy of ~50 MB. The cache is keyed by the server's binaries
// and version and by every migration, so a change to either builds a fresh
// one; entries unused for a day are removed.

const cacheMaxAge = 24 * time.Hour

// cacheDir is the cache entry for these binaries and migrations.
func cacheDir(ctx context.Context) (string, error) {
	bin, err := pgcluster.FindBinaries(ctx, pgcluster.FindOptions{Install: true})
	if err != nil {
		return "", err
	}
	version, err := exec.CommandContext(ctx, filepath.Join(bin, "postgres"), "--version").Output()
	if err != nil {
		return "", fmt.Errorf("postgres --version: %w", err)
	}
	migrations, err := schema.Migrations()
	if err != nil {
		return "", err
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00%s\x00", bin, version, templateDB)
	for _, m := range migrations {
		fmt.Fprintf(h, "%d\x00%s\x00%s\x00", m.Version, m.Name, m.SQL)
	}
	return filepath.Join(os.TempDir(), "inlet-pgtest-cache", hex.EncodeToString(h.Sum(nil))[:16]), nil
}

// restoreCache copies the cached data directory to dataDir; false when there
// is none (or the copy failed, which leaves nothing behind).
func restoreCache(entry, dataDir string) bool {
	if _, err := os.Stat(filepath.Join(entry, "PG_VERSION")); err != nil {
		return false
	}
	if err := copyDir(entry, dataDir); err != nil {
		_ = os.RemoveAll(dataDir)
		return false
	}
	now := time.Now()
	_ = os.Chtimes(entry, now, now) // in use: not pruned
	return true
}

// saveCache stores a stopped cluster's data directory as entry. Another
// binary may save the same entry at the same moment: the first rename wins.
func saveCache(entry, dataDir string) error {
	parent := filepath.Dir(entry)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return err
	}
	pruneCache(parent)
	tmp, err := os.MkdirTemp(parent, filepath.Base(entry)+".tmp-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	// copyDir creates its target: copy into tmp/data, then move that.
	if err := copyDir(dataDir, filepath.Join(tmp, "data")); err != nil {
		return err
	}
	if err := os.Rename(filepath.Join(tmp, "data"), entry); err != nil {
		if _, statErr := os.Stat(filepath.Join(entry, "PG_VERSION")); statErr != nil {
			return err
		}
	}
	return nil
}

// pruneCache removes entries (and abandoned temporary copies) not used for
// cacheMaxAge.
func pruneCache(parent string) {
	entries, err := os.ReadDir(parent)
	if err != nil {
		return
	}
	for _, e := range entries {
		if info, err := e.Info(); err == nil && time.Since(info.ModTime()) > cacheMaxAge {
			_ = os.RemoveAll(filepath.Join(parent, e.Name()))
		}
	}
}

// copyDir copies src to dst (which must not exist) keeping owners and modes:
// the server's user owns a data directory, mode 0700.
func copyDir(src, dst string) error {
	out, err := exec.Command("cp", "-a", src, dst).CombinedOutput()
	if err != nil {
		return fmt.Errorf("cp -a %s %s: %w: %s", src, dst, err, strings.TrimSpace(string(out)))
	}
	return nil
}
