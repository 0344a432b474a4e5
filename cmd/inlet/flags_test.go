package main

import (
	"bytes"
	"context"
	"errors"
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

// inlet send takes one body: --body and --body-file together are a usage
// error (the file silently won).
func TestSendRefusesTwoBodies(t *testing.T) {
	t.Setenv("DATABASE_URL", "")
	t.Chdir(t.TempDir())
	var out, errOut bytes.Buffer
	err := run(context.Background(), &environment{stdout: &out, stderr: &errOut},
		[]string{"send", "--body", `{"id":"evt_1"}`, "--body-file", "body.json", "stripe"})
	if err == nil || !errors.Is(err, errUsage) || !strings.Contains(err.Error(), "--body-file") {
		t.Fatalf("inlet send --body --body-file: error %v; want a usage error naming both", err)
	}
}
