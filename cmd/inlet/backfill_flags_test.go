package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// --since is for stripe only: with github it is a usage error naming it.
// (Found by a review: it was accepted and ignored, so --since 7d re-read the
// webhook's whole delivery history, and a --since that was no time at all
// was not refused.)
func TestBackfillGitHubRefusesSince(t *testing.T) {
	t.Setenv("DATABASE_URL", "")
	t.Chdir(t.TempDir())
	var out, errOut bytes.Buffer
	err := run(context.Background(), &environment{stdout: &out, stderr: &errOut},
		[]string{"backfill", "github", "--token", "ghp_test", "--repo", "acme/app", "--hook-id", "1", "--since", "not-a-time"})
	if err == nil || !strings.Contains(err.Error(), "since") {
		t.Fatalf("inlet backfill github --since not-a-time: error %v; want a usage error about --since", err)
	}
}
