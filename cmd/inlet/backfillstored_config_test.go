package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// inlet backfill stored refuses, before it connects, without a configuration
// naming the sources (no --config and no inlet.yaml, or a file without
// sources:): a usage error naming --config and saying why (review
// helper-240, fixed).
func TestBackfillStoredNeedsTheSourcesConfig(t *testing.T) {
	t.Setenv("DATABASE_URL", "postgres://inlet:secret@127.0.0.1:1/inlet")
	dir := t.TempDir()
	t.Chdir(dir)
	empty := filepath.Join(dir, "empty.yaml")
	if err := os.WriteFile(empty, []byte("ingress:\n  listen: \":8080\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no config file", nil, "cannot be undone"},
		{"no sources", []string{"--config", empty}, "has no sources"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			err := run(context.Background(), &environment{stdout: &out, stderr: &errOut}, append([]string{"backfill", "stored"}, tc.args...))
			if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), "--config") || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("inlet backfill stored %v: error %v; want a usage error naming --config and saying %q", tc.args, err, tc.want)
			}
		})
	}
}

// With the sources' configuration, inlet backfill stored connects through
// connectURL and gives up on a database that never answers, as
// TestOwnerCommandsFailOnAnUnansweringDatabase checks without one.
func TestBackfillStoredFailsOnAnUnansweringDatabase(t *testing.T) {
	t.Setenv("PGCONNECT_TIMEOUT", "")
	dir := t.TempDir()
	t.Chdir(dir)
	cfg := filepath.Join(dir, "inlet.yaml")
	if err := os.WriteFile(cfg, []byte("sources:\n  - name: stripe\n    type: stripe\n    secrets: [\"whsec_backfill_stored_test_secret\"]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	addr, release := silentServer(t)
	args := []string{"backfill", "stored", "--config", cfg, "--database-url", "postgres://inlet:secret@" + addr + "/inlet"}
	done := make(chan error, 1)
	var out, errOut bytes.Buffer
	go func() { done <- run(context.Background(), &environment{stdout: &out, stderr: &errOut}, args) }()
	select {
	case err := <-done:
		if err == nil || errors.Is(err, errUsage) {
			t.Fatalf("inlet %v against a database that never answers: error %v; want a connection error", args, err)
		}
	case <-time.After(12 * time.Second):
		release()
		err := <-done
		t.Fatalf("inlet %v still waiting after 12s on a database that never answers; after the server closed: %v", args, err)
	}
}
