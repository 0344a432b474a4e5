package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/inlet-dev/inlet/inletyaml"
)

// refusedOrRead fails the test unless loading the configuration from the
// working directory is refused naming link and its owner; read describes
// what a load that succeeded read.
func refusedOrRead(t *testing.T, link string, read func(cfg inletyaml.Config, from string)) {
	t.Helper()
	cfg, from, err := loadConfig(defaultConfigPath, inletyaml.Dev)
	if err != nil {
		if !strings.Contains(err.Error(), link) || !strings.Contains(err.Error(), "uid 65534") {
			t.Errorf("refused with %v; want the error to name %s and its owner uid %d", err, link, nobody)
		}
		return
	}
	read(cfg, from)
}

// TestSurvivor264_PlantedSymlinkOfAnotherUserIsRefused: checkOwner looks at
// the file found on the walk up itself (os.Lstat), not only at what it
// points to: an inlet.yaml that another user planted in a shared parent as
// a symbolic link, pointing at a file the victim owns (another project's
// config, with its database and forward URLs), is refused as git refuses a
// repository of another owner.
//
// Mutant (helper-264): cmd/inlet/common.go:119 checkOwner's
// []func{os.Lstat, os.Stat} made {os.Stat}: the link was followed and the
// victim's own file found, so the planted link was read. Existing tests
// (TestParentConfigOfAnotherUserIsNotRead,
// TestAnotherUsersProjectFilesAreRefusedWithAWayOut) plant regular files
// and directories only, which Stat and Lstat see alike.
func TestSurvivor264_PlantedSymlinkOfAnotherUserIsRefused(t *testing.T) {
	top, _ := sharedParent(t)
	target := filepath.Join(top, "victims-other-project.yaml")
	writeTestFile(t, target, "sources:\n  - name: linked\n    type: stripe\n    secrets: [whsec_survivor264_linked]\n", 0o644)
	link := filepath.Join(top, "inlet.yaml")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(link, nobody, nobody); err != nil {
		t.Fatal(err)
	}
	refusedOrRead(t, link, func(cfg inletyaml.Config, from string) {
		_, linked := cfg.Source("linked")
		t.Errorf("an inlet.yaml symlink owned by uid %d (another user) in a world-writable parent was read: config from %q, source linked %v; want a refusal naming it",
			nobody, from, linked)
	})
}

// TestSurvivor264_OwnSymlinkToAnotherUsersFileIsRefused: checkOwner also
// looks at what the file found on the walk up points to (os.Stat): an
// inlet.yaml link of the user's own that points at another user's file
// reads that user's content, and is refused.
//
// Mutant (helper-264): cmd/inlet/common.go:119 checkOwner's
// []func{os.Lstat, os.Stat} made {os.Lstat}: only the link, the user's
// own, was looked at, and the other user's file read through it. Existing
// tests plant no symbolic link, so Lstat alone saw every owner they set.
func TestSurvivor264_OwnSymlinkToAnotherUsersFileIsRefused(t *testing.T) {
	top, _ := sharedParent(t)
	theirs := filepath.Join(top, "theirs.yaml")
	plantFile(t, theirs, "sources:\n  - name: theirs\n    type: stripe\n    secrets: [whsec_survivor264_theirs]\n")
	link := filepath.Join(top, "inlet.yaml")
	if err := os.Symlink(theirs, link); err != nil { // owned by the current user
		t.Fatal(err)
	}
	refusedOrRead(t, link, func(cfg inletyaml.Config, from string) {
		_, read := cfg.Source("theirs")
		t.Errorf("an inlet.yaml link of the user's own pointing at a file of uid %d (another user) was read: config from %q, source theirs %v; want a refusal naming it",
			nobody, from, read)
	})
}
