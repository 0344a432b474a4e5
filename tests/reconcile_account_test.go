package tests

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/internal/pgtest"
)

// textColumn runs query, of one text column, and returns its values in
// order.
func textColumn(t *testing.T, conn *pgx.Conn, query string) []string {
	t.Helper()
	rows, err := conn.Query(context.Background(), query)
	if err != nil {
		t.Fatal(err)
	}
	values, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return values
}

// inlet reconcile --account records the run for the scope of the
// reconcile.sources entry of that account label (account=eu), so the
// scheduled reconcile counts its window as compared for that entry only; a
// Stripe run without --account (and --types) of a source whose entries label
// their accounts is refused (exit 2, naming --account and the labels), as it
// would be recorded for the whole source and count for every account; a dry
// run, which records no coverage, is not; a malformed label is a usage error
// (review helper-251).
func TestReconcileCLIAccountLabel(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer sk_test_account_eu" {
			http.Error(w, "bad key", http.StatusUnauthorized)
			return
		}
		fmt.Fprint(w, `{"object":"list","has_more":false,"data":[]}`)
	}))
	defer api.Close()
	cfg := writeFile(t, t.TempDir(), "inlet.yaml", "database_url: ${DATABASE_URL}\n"+
		"sources:\n  - {name: stripe, type: stripe, secrets: [\"whsec_us\", \"whsec_eu\"]}\n"+
		"reconcile:\n  sources:\n"+
		"    - {source: stripe, type: stripe, account: us, api_key: sk_test_account_us}\n"+
		"    - {source: stripe, type: stripe, account: eu, api_key: sk_test_account_eu}\n")
	env := cleanEnv("DATABASE_URL="+url, "STRIPE_API_KEY=sk_test_account_eu")
	reconcile := func(extra ...string) (string, string, int) {
		return runInlet(t, env, append([]string{"reconcile", "stripe", "--config", cfg, "--base-url", api.URL}, extra...)...)
	}

	out, errOut, code := reconcile()
	if code != 2 || !strings.Contains(errOut, "--account") || !strings.Contains(errOut, "(eu, us)") {
		t.Errorf("without --account: exit %d, stderr %q; want 2 naming --account and the labels eu, us\n%s", code, errOut, out)
	}
	if out, errOut, code = reconcile("--dry-run"); code != 0 {
		t.Errorf("a dry run without --account: exit %d, want 0\n%s%s", code, out, errOut)
	}
	if out, errOut, code = reconcile("--account", "EU"); code != 2 || !strings.Contains(errOut, `account label "EU"`) {
		t.Errorf("--account EU: exit %d, stderr %q; want 2 naming the label\n%s", code, errOut, out)
	}
	if out, errOut, code = reconcile("--account", "eu"); code != 0 {
		t.Fatalf("--account eu: exit %d, want 0\n%s%s", code, out, errOut)
	}

	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	scopes := textColumn(t, conn, `SELECT coalesce(scope, '<NULL>') FROM webhook_ingress.reconcile_runs WHERE NOT dry_run ORDER BY id`)
	if len(scopes) != 1 || scopes[0] != "account=eu" {
		t.Fatalf("recorded runs' scopes %q, want exactly [account=eu]", scopes)
	}
}
