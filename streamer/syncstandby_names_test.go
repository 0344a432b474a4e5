package streamer

import (
	"errors"
	"testing"
)

// synchronous_standby_names as PostgreSQL reads it: '*' or the stream's
// application_name (any case, quoted or not) in a plain list or a
// FIRST/ANY/count list makes the stream a candidate synchronous standby.
func TestSyncStandbyNamed(t *testing.T) {
	const app = "inlet-streamer-replication"
	for _, c := range []struct {
		names string
		want  bool
	}{
		{"", false},
		{"*", true},
		{"standby1", false},
		{"standby1, *", true},
		{"FIRST 1 (standby1)", false},
		{"FIRST 1 (standby1, *)", true},
		{"ANY 2 (*)", true},
		{"2 (s1, s2)", false},
		{`1 (s1, "INLET-streamer-replication")`, true},
		{`"inlet-streamer-replication"`, true},
		{`first 1 ("first", s2)`, false},
		{`"s""1", s2`, false},
		{"inlet-streamer-replication-2", false},
		{`"standby(1)", "inlet-streamer-replication"`, true},
		{`"standby(1)", s2`, false},
		{`FIRST 1 ("a)b", "inlet-streamer-replication")`, true},
		{`ANY 1 ("a,(b", s2)`, false},
		{`1, inlet-streamer-replication`, true},
		{"s1,\vinlet-streamer-replication", true},
		{"s1,\finlet-streamer-replication\f", true},
	} {
		if got := syncStandbyNamed(c.names, app); got != c.want {
			t.Errorf("syncStandbyNamed(%q, %q) = %v, want %v (names %q)", c.names, app, got, c.want, standbyNames(c.names))
		}
		if err := syncStandbyProblem(c.names, app); (err != nil) != c.want || (err != nil && !errors.Is(err, ErrReplicationSetup)) {
			t.Errorf("syncStandbyProblem(%q) = %v", c.names, err)
		}
	}
}
