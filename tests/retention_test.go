package tests

import (
	"context"
	"encoding/json"
	"net/url"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/internal/pgtest"
)

// sealedOldLog starts a database whose log begins ten weeks back (the
// migration partitioned from today) with a subscription of handler h, runs
// stmts on it (events, jobs, roles) and seals it; it returns the
// connection (closed at the end of the test) and the environment for
// runInlet.
func sealedOldLog(t *testing.T, stmts ...string) (*pgx.Conn, []string) {
	t.Helper()
	ctx := context.Background()
	dbURL := pgtest.NewDatabase(t)
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	for _, q := range append([]string{
		`SELECT webhook_ingress.drop_partition(period_start) FROM webhook_ingress.partitions()`,
		`SELECT webhook_ingress.create_partitions('week', 2, now() - interval '70 days')`,
		`INSERT INTO webhook_ingress.subscriptions (handler) VALUES ('h')`,
	}, stmts...) {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	env := cleanEnv("DATABASE_URL=" + dbURL)
	if out, errOut, code := runInlet(t, env, "audit", "seal"); code != 0 {
		t.Fatalf("audit seal: exit %d %s %s", code, out, errOut)
	}
	return conn, env
}

// inlet retention end to end: a dry run changes nothing; a run drops the old
// period whose jobs are finished and events sealed, keeps the one with an open
// job, and audit verify still passes; bad flags exit 2; a role that is not
// the owner is refused.
func TestRetentionEndToEnd(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	conn, env := sealedOldLog(t,
		`INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, raw_body, signature_verified, received_at) VALUES
			('stripe', 'stripe', 'evt_old_1', '{}', true, now() - interval '60 days'),
			('stripe', 'stripe', 'evt_old_2', '{}', true, now() - interval '60 days'),
			('stripe', 'stripe', 'evt_open', '{}', true, now() - interval '45 days'),
			('stripe', 'stripe', 'evt_new', '{}', true, now() - interval '1 minute')`,
		`UPDATE webhook_ingress.jobs SET status = 'completed' WHERE event_id IN (1, 2, 4)`,
		`DO $$ BEGIN
			IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'retention_test_operator') THEN
				CREATE ROLE retention_test_operator LOGIN PASSWORD 'op-pass' IN ROLE webhook_operator;
			END IF;
		END $$`,
	)

	out, errOut, code := runInlet(t, env, "retention", "--max-age", "30d", "--dry-run")
	if code != 0 || !strings.Contains(out, "would_drop") || !strings.Contains(out, "1 jobs not finished") {
		t.Fatalf("retention --dry-run: exit %d\n%s%s", code, out, errOut)
	}
	var events int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM webhook_ingress.events`).Scan(&events); err != nil || events != 4 {
		t.Fatalf("after the dry run: %d events (%v), want 4", events, err)
	}

	out, errOut, code = runInlet(t, env, "retention", "--max-age", "30d", "--json")
	var rep struct {
		Partitions []struct {
			Name    string `json:"partition"`
			Events  int64  `json:"events"`
			Verdict string `json:"verdict"`
		} `json:"partitions"`
	}
	if err := json.Unmarshal([]byte(out), &rep); code != 0 || err != nil {
		t.Fatalf("retention --json: exit %d (%v)\n%s%s", code, err, out, errOut)
	}
	got := map[string]int64{}
	for _, p := range rep.Partitions {
		if p.Events > 0 {
			got[p.Verdict] += p.Events
		}
	}
	if got["dropped"] != 2 || got["kept"] != 1 {
		t.Fatalf("retention: events by verdict %v, want 2 dropped and 1 kept\n%s", got, out)
	}
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM webhook_ingress.events`).Scan(&events); err != nil || events != 2 {
		t.Fatalf("after retention: %d events (%v), want 2", events, err)
	}
	out, errOut, code = runInlet(t, env, "audit", "verify", "--role", "webhook_auditor")
	if code != 0 || !strings.Contains(out, "2 dropped by retention") {
		t.Fatalf("audit verify after retention: exit %d\n%s%s", code, out, errOut)
	}

	if _, errOut, code := runInlet(t, env, "retention", "--max-age", "30 days"); code != 2 || !strings.Contains(errOut, "--max-age") {
		t.Fatalf("bad --max-age: exit %d, stderr %q", code, errOut)
	}
	if _, errOut, code := runInlet(t, env, "retention", "--interval", "fortnight"); code != 2 || !strings.Contains(errOut, "fortnight") {
		t.Fatalf("bad --interval: exit %d, stderr %q", code, errOut)
	}
	u, err := url.Parse(conn.Config().ConnString())
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword("retention_test_operator", "op-pass")
	_, errOut, code = runInlet(t, cleanEnv(), "retention", "--max-age", "1d", "--database-url", u.String())
	if code != 1 || !strings.Contains(errOut, "not the owner") || !strings.Contains(errOut, "retention_test_operator") {
		t.Fatalf("retention as the operator: exit %d, stderr %q", code, errOut)
	}
}
