package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/internal/pgtest"
)

// inlet reconcile against a fake Stripe events API that lists events the log
// never received, lists one twice, pages, and rate-limits once: a dry run
// stores nothing, a run stores exactly the missing ones marked with its run
// id, a second run stores nothing, and a window past Stripe's 30 days is a
// usage error naming --since.
func TestReconcileCLI(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	now := time.Now().Unix()
	type ev struct {
		id, typ   string
		delivered bool
	}
	list := []ev{{"evt_c4", "invoice.paid", false}, {"evt_c3", "invoice.paid", true}, {"evt_c2", "charge.refunded", false},
		{"evt_c2", "charge.refunded", false}, {"evt_c1", "invoice.paid", true}}
	body := func(i int, e ev) string {
		return fmt.Sprintf(`{"id":%q,"object":"event","type":%q,"created":%d,"data":{"object":{}}}`, e.id, e.typ, now-int64(100*(i+1)))
	}
	for i, e := range list {
		if e.delivered {
			if _, err := conn.Exec(ctx, `INSERT INTO webhook_ingress.events
				(provider, scheme, external_event_id, event_type, headers, request_uri, raw_body, signature_verified)
				VALUES ('stripe', 'stripe', $1, $2, '{}', '/webhooks/stripe', $3, true)`, e.id, e.typ, []byte(body(i, e))); err != nil {
				t.Fatal(err)
			}
		}
	}
	var mu sync.Mutex
	limited := false
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if r.Header.Get("Authorization") != "Bearer sk_test_cli_reconcile" {
			http.Error(w, "bad key", http.StatusUnauthorized)
			return
		}
		if !limited {
			limited = true
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		start := 0
		if after := r.URL.Query().Get("starting_after"); after != "" {
			for i, e := range list {
				if e.id == after {
					start = i + 1
				}
			}
		}
		end := min(start+2, len(list))
		var data []string
		for i := start; i < end; i++ {
			data = append(data, body(i, list[i]))
		}
		fmt.Fprintf(w, `{"object":"list","has_more":%t,"data":[%s]}`, end < len(list), strings.Join(data, ","))
	}))
	defer api.Close()
	cfg := writeFile(t, t.TempDir(), "inlet.yaml", "database_url: ${DATABASE_URL}\nsources:\n  - {name: stripe, type: stripe, secrets: [\"whsec_cli\"]}\n")
	env := cleanEnv("DATABASE_URL="+url, "STRIPE_API_KEY=sk_test_cli_reconcile")
	reconcile := func(extra ...string) (string, string, int) {
		return runInlet(t, env, append([]string{"reconcile", "stripe", "--config", cfg, "--base-url", api.URL}, extra...)...)
	}
	count := func(sql string) int {
		t.Helper()
		var n int
		if err := conn.QueryRow(ctx, sql).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	type report struct {
		RunID int64 `json:"run_id"`
		Items []struct {
			Type    string `json:"type"`
			Missing int    `json:"missing"`
		} `json:"items"`
		Total struct {
			Listed        int `json:"listed"`
			AlreadyStored int `json:"already_stored"`
			Missing       int `json:"missing"`
			Stored        int `json:"stored"`
			Duplicates    int `json:"duplicates"`
		} `json:"total"`
	}
	parse := func(out string) report {
		t.Helper()
		var r report
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("--json output %q: %v", out, err)
		}
		return r
	}

	out, errOut, code := reconcile("--dry-run", "--json")
	if code != 0 {
		t.Fatalf("dry run: exit %d\n%s%s", code, out, errOut)
	}
	dry := parse(out)
	if dry.Total.Listed != 4 || dry.Total.Missing != 2 || dry.Total.Stored != 0 || dry.Total.Duplicates != 1 || len(dry.Items) != 2 {
		t.Errorf("dry run: %+v", dry)
	}
	if n := count(`SELECT count(*) FROM webhook_ingress.events`); n != 2 {
		t.Fatalf("the dry run stored: %d events", n)
	}

	out, errOut, code = reconcile()
	if code != 0 {
		t.Fatalf("run: exit %d\n%s%s", code, out, errOut)
	}
	if !strings.Contains(out, "TYPE") || !regexpLine(out, `^total\s+4\s+2\s+2\s+2\s+1$`) || !regexpLine(out, `^charge\.refunded\s+1\s+0\s+1\s+1\s+1$`) {
		t.Errorf("table:\n%s", out)
	}
	if n := count(`SELECT count(*) FROM webhook_ingress.events WHERE external_event_id IN ('evt_c4', 'evt_c2')
		AND NOT signature_verified AND headers ? 'Inlet-Reconcile' AND headers->'Inlet-Backfill' = '["stripe-events-api"]'`); n != 2 {
		t.Errorf("%d reconciled events marked, want 2", n)
	}
	if n := count(`SELECT count(*) FROM webhook_ingress.events`); n != 4 {
		t.Errorf("%d events, want 4", n)
	}

	out, errOut, code = reconcile("--json")
	if code != 0 {
		t.Fatalf("second run: exit %d\n%s%s", code, out, errOut)
	}
	if again := parse(out); again.Total.Missing != 0 || again.Total.AlreadyStored != 4 {
		t.Errorf("second run: %+v", again)
	}
	if n := count(`SELECT count(*) FROM webhook_ingress.reconcile_runs WHERE finished_at IS NOT NULL AND error IS NULL`); n != 3 {
		t.Errorf("%d runs recorded, want 3", n)
	}

	_, errOut, code = reconcile("--since", "40d")
	if code != 2 || !strings.Contains(errOut, "--since") {
		t.Errorf("--since 40d: exit %d, stderr %q; want 2 naming --since", code, errOut)
	}
}

// regexpLine reports whether a line of out (spaces trimmed) matches re.
func regexpLine(out, re string) bool {
	r := regexp.MustCompile(re)
	for _, l := range strings.Split(out, "\n") {
		if r.MatchString(strings.TrimSpace(l)) {
			return true
		}
	}
	return false
}

// A reconcile: interval out of range stops inlet streamer at start, naming
// the key, before it connects anywhere.
func TestStreamerRefusesABadReconcileInterval(t *testing.T) {
	t.Parallel()
	cfg := writeFile(t, t.TempDir(), "inlet.yaml", "database_url: postgres://127.0.0.1:1/x\nreconcile:\n  enabled: true\n  interval: 10s\n  sources: [{source: stripe, type: stripe, api_key: sk_test}]\n")
	_, errOut, code := runInlet(t, cleanEnv(), "streamer", "--config", cfg)
	if code != 1 || !strings.Contains(errOut, "reconcile.interval") {
		t.Fatalf("exit %d, stderr %q: want exit 1 naming reconcile.interval", code, errOut)
	}
}
