package pgcluster

import (
	"os"
	"path/filepath"
	"testing"
)

func fakeBinDir(t *testing.T, root string, version string) string {
	t.Helper()
	dir := filepath.Join(root, version, "bin")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tool := range serverTools {
		if err := os.WriteFile(filepath.Join(dir, tool), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// Debian installs one bindir per major version: the newest wins, by number
// (16 after 9, not before it).
func TestVersionedDirsNewestFirst(t *testing.T) {
	root := t.TempDir()
	for _, v := range []string{"9.6", "16", "13"} {
		fakeBinDir(t, root, v)
	}
	got := versionedDirs(filepath.Join(root, "*", "bin"))
	want := []string{"16", "13", "9.6"}
	if len(got) != len(want) {
		t.Fatalf("got %v", got)
	}
	for i, v := range want {
		if got[i] != filepath.Join(root, v, "bin") {
			t.Fatalf("order %v, want %v", got, want)
		}
	}
}

func TestBinDirFromEnvironment(t *testing.T) {
	dir := fakeBinDir(t, t.TempDir(), "99")
	t.Setenv("INLET_PG_BINDIR", dir)
	got, ok := lookBinaries()
	if !ok || got != dir {
		t.Fatalf("lookBinaries = %q, %v; want %q", got, ok, dir)
	}
	// A directory missing one of the tools is not a bindir.
	if err := os.Remove(filepath.Join(dir, "pg_ctl")); err != nil {
		t.Fatal(err)
	}
	if hasTools(dir) {
		t.Fatal("hasTools without pg_ctl")
	}
}

func TestReachable(t *testing.T) {
	root := t.TempDir()
	private := filepath.Join(root, "private", "data")
	if err := os.MkdirAll(private, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(root, "private"), 0o700); err != nil {
		t.Fatal(err)
	}
	// Another user (uid/gid nobody owns here) cannot pass the 0700 directory.
	if reachable(private, 54321, 54321) {
		t.Fatal("reachable through a 0700 directory of another user")
	}
	if !reachable(private, os.Getuid(), os.Getgid()) && os.Getuid() != 0 {
		t.Fatal("the owner cannot reach its own directory")
	}
}
