package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Regression test for a defect found by review helper-92 (fixed; the
// text below describes the behaviour before the fix).
//
// TestConfigCheckAndRetentionAgreeOnAHugeMaxAge: the same root cause as
// tests/TestRetentionRefusesAMaxAgeTooLongToHold, seen from
// the config file. retention.ParseAge (retention/section.go) multiplies the
// day count by 24h without an overflow check, so `retention.max_age: 365000d`
// (1000 years) becomes a negative duration. Section.Validate only checks that
// the age parses, so `inlet config check` says "ok" (exit 0), while
// `inlet retention` with the very file refuses it with
// "retention: max age -1488191h...: must not be negative" — a value the
// operator wrote positive. docs/configuration.md promises "a file one command
// accepts no other rejects", and a bad value must be refused at start with a
// message naming the key.
//
// Expected: config check (and every service) refuses it as
// `retention.max_age: "365000d" is too long ...`.
func TestConfigCheckAndRetentionAgreeOnAHugeMaxAge(t *testing.T) {
	t.Setenv("DATABASE_URL", "")
	dir := t.TempDir()
	t.Chdir(dir)
	path := filepath.Join(dir, "inlet.yaml")
	if err := os.WriteFile(path, []byte("retention:\n  max_age: 365000d\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	checkErr := run(context.Background(), &environment{stdout: &out, stderr: &errOut}, []string{"config", "check", "--config", path})
	var rOut, rErrOut bytes.Buffer
	retErr := run(context.Background(), &environment{stdout: &rOut, stderr: &rErrOut}, []string{"retention", "--config", path, "--dry-run"})
	t.Logf("config check: %v %s; retention: %v", checkErr, out.String(), retErr)
	if checkErr == nil {
		t.Errorf("inlet config check accepted retention.max_age: 365000d (%q), which inlet retention refuses (%v)", strings.TrimSpace(out.String()), retErr)
	}
	if retErr != nil && strings.Contains(retErr.Error(), "-") && !strings.Contains(retErr.Error(), "max_age") {
		t.Errorf("inlet retention's error does not name retention.max_age and shows a negative age the operator never wrote: %v", retErr)
	}
}
