package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/internal/pgtest"
)

// inlet reconcile compares nothing inlet retention dropped (review
// helper-272): with a period dropped that ended 2h ago, --since 3h starts
// the run at its end, says on stderr what it skipped and reports it in
// --json's "skipped" (since is the compared start, as recorded in
// reconcile_runs); a window wholly before it is refused, exit 2, with no
// request to the API and no run recorded.
func TestReconcileCLISkipsWhatRetentionDropped(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	var requests atomic.Int64
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		fmt.Fprint(w, `{"object":"list","has_more":false,"data":[]}`)
	}))
	defer api.Close()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	// What drop_partition records for a period that ended 2h ago (the
	// owner writes retention_log; its rows are never changed).
	var end time.Time
	if err := conn.QueryRow(ctx, `INSERT INTO webhook_ingress.retention_log (period_start, period_end, events, jobs, attempts, event_ids, sealed_through)
		VALUES (date_trunc('second', now()) - interval '26 hours', date_trunc('second', now()) - interval '2 hours', 0, 0, 0, '{}', 0)
		RETURNING period_end`).Scan(&end); err != nil {
		t.Fatal(err)
	}
	cfg := writeFile(t, t.TempDir(), "inlet.yaml", "database_url: ${DATABASE_URL}\n"+
		"sources:\n  - {name: stripe, type: stripe, secrets: [\"whsec_x\"]}\n")
	env := cleanEnv("DATABASE_URL="+url, "STRIPE_API_KEY=sk_test_retention")
	reconcile := func(extra ...string) (string, string, int) {
		return runInlet(t, env, append([]string{"reconcile", "stripe", "--config", cfg, "--base-url", api.URL}, extra...)...)
	}

	out, errOut, code := reconcile("--since", "3h", "--json")
	if code != 0 {
		t.Fatalf("--since 3h: exit %d\n%s%s", code, out, errOut)
	}
	stamp := end.UTC().Format(time.RFC3339)
	if !strings.Contains(errOut, "reconcile: skipped ") || !strings.Contains(errOut, "inlet retention dropped the log's events (and their dedupe keys) before "+stamp) {
		t.Errorf("--since 3h: stderr %q, want it to say the part before %s was skipped", errOut, stamp)
	}
	var rep struct {
		RunID   int64     `json:"run_id"`
		Since   time.Time `json:"since"`
		Skipped *struct {
			Since  time.Time `json:"since"`
			Until  time.Time `json:"until"`
			Reason string    `json:"reason"`
		} `json:"skipped"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("--json: %v\n%s", err, out)
	}
	if !rep.Since.Equal(end) || rep.Skipped == nil || !rep.Skipped.Until.Equal(end) || rep.Skipped.Reason != "retention" ||
		end.Sub(rep.Skipped.Since) < 59*time.Minute || end.Sub(rep.Skipped.Since) > 61*time.Minute {
		t.Errorf("--json: since %s, skipped %+v; want since %s and skipped from about 3h ago up to it, reason retention\n%s", rep.Since, rep.Skipped, stamp, out)
	}
	var recorded time.Time
	if err := conn.QueryRow(ctx, `SELECT window_since FROM webhook_ingress.reconcile_runs WHERE id = $1`, rep.RunID).Scan(&recorded); err != nil {
		t.Fatal(err)
	}
	if !recorded.Equal(end) {
		t.Errorf("run %d recorded window_since %s, want %s", rep.RunID, recorded, stamp)
	}

	before := requests.Load()
	out, errOut, code = reconcile("--since", "6h", "--until", "4h")
	if code != 2 || !strings.Contains(errOut, "inlet retention dropped the whole window") || !strings.Contains(errOut, stamp) {
		t.Errorf("a window wholly before %s: exit %d, stderr %q; want 2 saying retention dropped the whole window\n%s", stamp, code, errOut, out)
	}
	if n := requests.Load() - before; n != 0 {
		t.Errorf("a window wholly before %s asked the API %d times, want none", stamp, n)
	}
	var runs int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM webhook_ingress.reconcile_runs`).Scan(&runs); err != nil {
		t.Fatal(err)
	}
	if runs != 1 {
		t.Errorf("%d runs recorded, want the first only", runs)
	}
}
