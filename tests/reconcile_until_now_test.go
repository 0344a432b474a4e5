package tests

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/inlet-dev/inlet/internal/pgtest"
)

// Review helper-191 (this describes the code before the fix). Defect:
// `inlet reconcile stripe --until now`, the form docs/operations.md
// ("Reconciliation with the provider") and the command's own --help usage
// line (`inlet reconcile stripe [--since 24h] [--until now] ...`) show, is
// refused as a usage error:
//
//	inlet: --until: time "now": want RFC 3339 (2026-03-03T09:00:00Z), a date
//	(2026-03-03) or a duration back from now (24h, 7d); see 'inlet reconcile --help'
//
// An operator (or a cron line) copying the documented command gets exit 2
// and no reconcile. cmd/inlet/reconcile.go:65 passes --until to
// timeFlag → admin.ParseTime (admin/admin.go:145), which knows RFC 3339, a
// date and durations, but not "now".
//
// Expected: --until now is the window ending now, as leaving --until out is
// (exit 0, the run recorded).
//
// It failed before the fix (exit 2, the usage error above) and passes since
// admin.ParseTime reads "now" as the moment of the call.
func TestReconcileCLIUntilNowAsDocumented(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t)
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer sk_test_review191" {
			http.Error(w, "bad key", http.StatusUnauthorized)
			return
		}
		fmt.Fprint(w, `{"object":"list","has_more":false,"data":[]}`)
	}))
	defer api.Close()
	cfg := writeFile(t, t.TempDir(), "inlet.yaml", "database_url: ${DATABASE_URL}\nsources:\n  - {name: stripe, type: stripe, secrets: [\"whsec_cli\"]}\n")
	env := cleanEnv("DATABASE_URL="+url, "STRIPE_API_KEY=sk_test_review191")

	// The command's own usage line shows --until now.
	help, helpErr, _ := runInlet(t, env, "reconcile", "--help")
	if !strings.Contains(help+helpErr, "--until now") {
		t.Fatalf("reconcile --help no longer documents --until now:\n%s%s", help, helpErr)
	}
	out, errOut, code := runInlet(t, env, "reconcile", "stripe", "--config", cfg, "--base-url", api.URL, "--since", "24h", "--until", "now")
	if code != 0 {
		t.Fatalf("inlet reconcile stripe --since 24h --until now (as operations.md and --help write it): exit %d, want 0\n%s%s", code, out, errOut)
	}
}
