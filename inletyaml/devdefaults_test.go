package inletyaml

import (
	"slices"
	"testing"
	"time"
)

// inlet dev's own defaults go to the keys a config file leaves out, and
// only to those: a key the file has keeps its value, 0 or "" (off)
// included, also under its old name or through an alias (review
// helper-231).
func TestWithDevDefaultsOnlyForKeysTheFileLeavesOut(t *testing.T) {
	t.Parallel()
	const source = "sources:\n  - name: stripe\n    type: stripe\n    secrets: [whsec_devdefaults]\n"
	for _, tc := range []struct {
		name, file    string
		seal, check   time.Duration
		listen, token string
		applied       []string
	}{
		{name: "none set", file: source, seal: 10 * time.Second, check: 10 * time.Second,
			listen: "127.0.0.1:8084", token: devAdminTokenForTest,
			applied: []string{"audit.seal_every", "silence.check_every", "admin.listen", "admin.token"}},
		{name: "set to zero and off", file: source + "audit:\n  seal_every: 0s\nsilence:\n  check_every: 0s\nadmin:\n  listen: \"\"\n",
			seal: 0, check: time.Minute /* the services' own default for 0 */, listen: "", token: ""},
		{name: "old key name", file: source + "heartbeat:\n  check_every: 30s\n",
			seal: 10 * time.Second, check: 30 * time.Second, listen: "127.0.0.1:8084", token: devAdminTokenForTest,
			applied: []string{"audit.seal_every", "admin.listen", "admin.token"}},
		{name: "own token", file: source + "admin:\n  token: a-token-of-my-own-32-bytes-long!\n",
			seal: 10 * time.Second, check: 10 * time.Second, listen: "127.0.0.1:8084", token: "a-token-of-my-own-32-bytes-long!",
			applied: []string{"audit.seal_every", "silence.check_every", "admin.listen"}},
		{name: "alias", file: source + "silence:\n  check_every: &every 30s\naudit:\n  seal_every: *every\n",
			seal: 30 * time.Second, check: 30 * time.Second, listen: "127.0.0.1:8084", token: devAdminTokenForTest,
			applied: []string{"admin.listen", "admin.token"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, err := Parse([]byte(tc.file), env(nil))
			if err != nil {
				t.Fatal(err)
			}
			got, applied, err := WithDevDefaults(c, []byte(tc.file))
			if err != nil {
				t.Fatal(err)
			}
			if got.Audit.SealEvery != tc.seal || got.Silence.CheckEvery != tc.check || got.Admin.Listen != tc.listen || got.Admin.Token != tc.token {
				t.Errorf("seal_every %s, check_every %s, admin.listen %q, token set %v; want %s, %s, %q, %v",
					got.Audit.SealEvery, got.Silence.CheckEvery, got.Admin.Listen, got.Admin.Token != "", tc.seal, tc.check, tc.listen, tc.token != "")
			}
			if !slices.Equal(applied, tc.applied) {
				t.Errorf("applied %v; want %v", applied, tc.applied)
			}
			if err := got.Validate(); err != nil {
				t.Errorf("with inlet dev's defaults: %v", err)
			}
		})
	}
}

// devAdminTokenForTest is dev.yaml's admin token.
const devAdminTokenForTest = "inlet-dev-admin-token"
