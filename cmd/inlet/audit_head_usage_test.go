package main

import (
	"errors"
	"strings"
	"testing"
)

// A mistyped --head is a usage error (exit 2) said before any database is
// reached, not a failed verification (exit 1), which a cron job alarms on as
// tampering (noted by review helper-323).
func TestAuditVerifyRefusesAMalformedHeadAsUsage(t *testing.T) {
	clearDevEnv(t)
	t.Setenv("DATABASE_URL", "postgres://nobody@127.0.0.1:1/none?connect_timeout=1")
	t.Chdir(t.TempDir())
	for _, head := range []string{"zz", strings.Repeat("a", 63), strings.Repeat("ab", 33)} {
		_, err := runInlet(t, "audit", "verify", "--head", head)
		if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), "--head") {
			t.Errorf("inlet audit verify --head %s: %v; want a usage error naming --head", head, err)
		}
	}
}

// audit seal --every --json printed nothing: --json prints one pass's
// checkpoints, so with --every it is refused (noted by review helper-323).
func TestAuditSealRefusesJSONWithEvery(t *testing.T) {
	clearDevEnv(t)
	t.Setenv("DATABASE_URL", "postgres://nobody@127.0.0.1:1/none?connect_timeout=1")
	t.Chdir(t.TempDir())
	_, err := runInlet(t, "audit", "seal", "--every", "1m", "--json")
	if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), "--json") {
		t.Errorf("inlet audit seal --every 1m --json: %v; want a usage error naming --json", err)
	}
}
