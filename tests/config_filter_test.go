package tests

import (
	"fmt"
	"strings"
	"testing"

	"github.com/inlet-dev/inlet/internal/pgtest"
)

// Regression test for a defect found by review helper-92 (fixed; the
// text below describes the behaviour before the fix).
//
// TestConfigCheckRefusesABrokenHandlerFilter: docs/configuration.md,
// "Checking a file": "Every command checks the whole file the same way when
// it starts ... so a file one command accepts no other rejects", and `inlet
// config check` prints "FILE: ok" only for a file every service accepts.
// A consumer handler whose CEL `filter:` does not compile
// (`payload.amount >`) passes `inlet config check` (exit 0, "ok"), but
// `inlet dev` (and `inlet consumer`) with the same file refuse to start on
// it ("filter: ..."): CI that gates deploys on `inlet config check` ships a
// file the consumers will not run, and the refusal names no key path or line.
//
// Root cause: consumers.Section.Validate (consumers/section.go) cannot
// compile CEL (package filter is a module of its own, reached only through
// consumers.Config.CheckFilter, set in cmd/inlet/pipeline.go:99), and
// inletyaml.Config.Validate (inletyaml/inletyaml.go) never calls
// filter.Check on consumer.handlers[].filter.
//
// Expected: `inlet config check` exits 1 with
// `FILE:LINE: consumer.handlers[0].filter: <CEL error>`, and every service
// refuses the file the same way at start. Suggested fix: in
// inletyaml.Config.Validate, run filter.Check on each handler's Filter and
// report it as consumer.handlers[i].filter.
func TestConfigCheckRefusesABrokenHandlerFilter(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.NewDatabase(t)
	dir := t.TempDir()
	cfg := writeFile(t, dir, "inlet.yaml", fmt.Sprintf(`database_url: %q
ingress:
  listen: %q
  metrics_listen: "off"
admin:
  listen: ""
consumer:
  handlers:
    - name: big_payments
      type: log
      filter: "payload.amount >"
`, dbURL, freeAddr(t)))
	env := cleanEnv()

	// What the service does with the file: it refuses to start.
	_, devErr, devCode := runInletIn(t, dir, env, "dev", "--config", cfg, "--admin-listen", "off", "--metrics-listen", "off")
	if devCode == 0 || !strings.Contains(devErr, "filter") {
		t.Fatalf("control: inlet dev with a broken filter: exit %d (want non-zero naming the filter)\n%s", devCode, devErr)
	}

	out, errOut, code := runInletIn(t, dir, env, "config", "check", "--config", cfg)
	if code != 1 || !strings.Contains(out, "consumer.handlers[0].filter") {
		t.Errorf("inlet config check: exit %d, %q; want exit 1 with a problem at consumer.handlers[0].filter, "+
			"as inlet dev refuses the file: %s\nstderr: %s", code, strings.TrimSpace(out), strings.TrimSpace(devErr), errOut)
	}
}
