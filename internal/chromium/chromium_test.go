package chromium_test

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/internal/chromium"
)

// Find must come back with a browser that runs: on CI (root, fresh Debian)
// by installing it.
func TestFindReturnsARunnableBrowser(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	p, err := chromium.Find(ctx, chromium.Options{Install: true})
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.CommandContext(ctx, p, "--version").CombinedOutput()
	if err != nil || !strings.Contains(strings.ToLower(string(out)), "chrom") {
		t.Fatalf("%s --version: %v\n%s", p, err, out)
	}
	t.Logf("%s: %s", p, strings.TrimSpace(string(out)))
}

func TestFindRefusesAMissingINLET_CHROMIUM(t *testing.T) {
	t.Setenv("INLET_CHROMIUM", "/nonexistent/chromium")
	_, err := chromium.Find(context.Background(), chromium.Options{Install: true})
	if err == nil || !strings.Contains(err.Error(), "INLET_CHROMIUM=/nonexistent/chromium") {
		t.Fatalf("err = %v", err)
	}
	if errors.Is(err, chromium.ErrNotFound) {
		t.Fatalf("a wrong INLET_CHROMIUM is not ErrNotFound: %v", err)
	}
}
