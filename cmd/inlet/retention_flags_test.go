package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// A bad --lock-timeout or --ahead is a usage error naming the flag, found
// before any database is needed, as the same values are refused in the
// file. (Found by a review: a negative --lock-timeout and an --ahead below
// -1 counted as not given, and the run used the config's values.)
func TestRetentionRefusesNegativeFlags(t *testing.T) {
	t.Setenv("DATABASE_URL", "")
	t.Chdir(t.TempDir())
	for _, args := range [][]string{
		{"retention", "--lock-timeout", "-5s"},
		{"retention", "--ahead", "-3"},
	} {
		var out, errOut bytes.Buffer
		err := run(context.Background(), &environment{stdout: &out, stderr: &errOut}, args)
		flag := strings.TrimPrefix(args[1], "--")
		if err == nil || !strings.Contains(err.Error(), flag) {
			t.Errorf("inlet %s: error %v; want a usage error naming %s", strings.Join(args, " "), err, args[1])
		}
	}
}
