package ingress_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/ingress"
	"github.com/inlet-dev/inlet/internal/pgtest"
	"github.com/inlet-dev/inlet/internal/testlog"
)

// TestReadyzNotReadyOnReadOnlyDatabase (review helper-200; this describes
// the code before the fix).
//
// Defect: GET /readyz of ingress (and, through the same schema.Check, of
// inlet streamer and inlet consumer) answered 200 "ready" while the database
// it is connected to is read-only: a hot standby reached after a failover
// (a cluster endpoint whose DNS still names the demoted primary, a
// multi-host URL without target_session_attrs=read-write) or a server put
// into default_transaction_read_only (what managed PostgreSQL services do
// when the disk fills). Every webhook is then answered 503
// database_unavailable (SQLSTATE 25006), so the service cannot do its one
// job, yet the orchestrator kept it in the load balancer and every
// "pods ready" panel stayed green; only inlet_ingress_unavailable_total
// showed it.
//
// Expected: /readyz answers 503 database_unavailable while a write cannot
// succeed, as it does when the database is down (TestDatabaseDownThenRecovers
// and its /readyz check), and the failure is logged once, not per probe.
//
// Root cause: internal/database/database.go Ready → schema.Check ran only a
// SELECT of schema_migrations, which a read-only server answers. It failed
// before the fix (200 {"status":"ready"}); database.Ready now runs
// schema.CheckWritable, which reads transaction_read_only in the same
// statement.
func TestReadyzNotReadyOnReadOnlyDatabase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.NewDatabase(t)

	// Make the database read-only for every new session, as a standby (or a
	// server at disk-full protection) is.
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET default_transaction_read_only = on', current_database()); END $$`); err != nil {
		t.Fatal(err)
	}
	conn.Close(ctx)

	b := setupOn(t, url, 1<<10)

	code, answer, _ := do(t, stripeRequest(t, b.url, []byte(`{"id":"evt_readonly","type":"invoice.paid"}`), time.Now()))
	if code != http.StatusServiceUnavailable {
		t.Fatalf("webhook on a read-only database: %d %s, want 503 (nothing can be stored)", code, answer)
	}

	for range 3 {
		resp, err := http.Get(b.url + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), `"database_unavailable"`) {
			t.Fatalf("GET /readyz while every webhook is answered 503 (database read-only): %d %s, want 503 database_unavailable: %s",
				resp.StatusCode, body, fmt.Sprintf("the webhook got %d %s", code, answer))
		}
	}
	lines := logLines(t, b.logs, "not ready")
	if len(lines) != 1 || lines[0]["reason"] != "database_unavailable" || !strings.Contains(fmt.Sprint(lines[0]["error"]), "read-only") {
		t.Fatalf("three failed probes logged %d \"not ready\" lines, want one saying the database is read-only: %v", len(lines), lines)
	}
}

// TestReadyzLogsOncePerChange: /readyz is on the public webhook port and
// unauthenticated; a "not ready" line per probe let anyone fill the log
// while the database was down (review helper-200). Each change of state is
// logged once: ready → not ready with its reason, a new reason, and back.
// It failed before the fix: every failed probe logged a line (4 here) and
// recovery none.
func TestReadyzLogsOncePerChange(t *testing.T) {
	t.Parallel()
	var state atomic.Int32 // 0 ready, 1 database down, 2 something else
	b := setupWith(t, pgtest.NewDatabase(t), func(c *ingress.Config) {
		c.Ready = func(context.Context) error {
			switch state.Load() {
			case 1:
				return fmt.Errorf("read applied schema version: %w", context.DeadlineExceeded)
			case 2:
				return errors.New("schema not current")
			}
			return nil
		}
	})
	probe := func(want int) {
		t.Helper()
		resp, err := http.Get(b.url + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Fatalf("GET /readyz: %d, want %d", resp.StatusCode, want)
		}
	}
	for _, s := range []int32{0, 1, 1, 1, 2, 0, 0} {
		state.Store(s)
		if s == 0 {
			probe(http.StatusOK)
		} else {
			probe(http.StatusServiceUnavailable)
		}
	}
	down := logLines(t, b.logs, "not ready")
	if len(down) != 2 || down[0]["reason"] != "database_unavailable" || down[1]["reason"] != "not_ready" {
		t.Fatalf("\"not ready\" lines %v, want two: database_unavailable, then not_ready", down)
	}
	if up := logLines(t, b.logs, "ready again"); len(up) != 1 {
		t.Fatalf("\"ready again\" lines %v, want one", up)
	}
}

// logLines returns the JSON log lines of logs whose msg is msg.
func logLines(t *testing.T, logs *testlog.Buffer, msg string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for line := range strings.SplitSeq(logs.String(), "\n") {
		var l map[string]any
		if json.Unmarshal([]byte(line), &l) == nil && l["msg"] == msg {
			out = append(out, l)
		}
	}
	return out
}
