package tests

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// ownerMemberLogins (review helper-152) creates two login roles, members of
// the owner of webhook_ingress (which inlet retention's CheckOwner accepts):
// a DBA's own login and the CronJob's. It returns their names and a URL
// for the CronJob's login.
func ownerMemberLogins(t *testing.T, conn *pgx.Conn) (owner, dba, cron, cronURL string) {
	t.Helper()
	ctx := context.Background()
	if err := conn.QueryRow(ctx, `SELECT pg_get_userbyid(relowner) FROM pg_class WHERE oid = 'webhook_ingress.events'::regclass`).Scan(&owner); err != nil {
		t.Fatal(err)
	}
	suffix := fmt.Sprintf("%d_%d", os.Getpid(), time.Now().UnixNano()%1_000_000_000)
	dba, cron = "review152_dba_"+suffix, "review152_cron_"+suffix
	for _, r := range []string{dba, cron} {
		for _, q := range []string{
			fmt.Sprintf(`CREATE ROLE %s LOGIN PASSWORD 'pw'`, r),
			fmt.Sprintf(`GRANT %s TO %s`, pgx.Identifier{owner}.Sanitize(), r),
		} {
			if _, err := conn.Exec(ctx, q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
		t.Cleanup(func() {
			c := context.Background()
			_, _ = conn.Exec(c, fmt.Sprintf(`REASSIGN OWNED BY %s TO %s`, r, pgx.Identifier{owner}.Sanitize()))
			_, _ = conn.Exec(c, fmt.Sprintf(`DROP OWNED BY %s`, r))
			_, _ = conn.Exec(c, fmt.Sprintf(`DROP ROLE IF EXISTS %s`, r))
		})
	}
	u, err := url.Parse(conn.Config().ConnString())
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(cron, "pw")
	return owner, dba, cron, u.String()
}

// pre060Period puts the database back to what an installation at 059 looks
// like for 060: the period of the event evt_id partitioned by a DBA's own
// login (a member of the owner role, as 047's create_partitions left it),
// and 060/061 not yet applied (both are CREATE OR REPLACE and re-owning, so
// running them again is what the upgrade runs). Returns the period's
// events partition.
func pre060Period(t *testing.T, conn *pgx.Conn, dba, extID string) string {
	t.Helper()
	ctx := context.Background()
	var part string
	if err := conn.QueryRow(ctx, `SELECT p.events_partition FROM webhook_ingress.partitions() p
		JOIN webhook_ingress.events e ON e.received_at >= p.period_start AND e.received_at < p.period_end
		WHERE e.external_event_id = $1`, extID).Scan(&part); err != nil {
		t.Fatal(err)
	}
	suffix := strings.TrimPrefix(part, "events_")
	for _, tbl := range []string{"events_", "jobs_", "job_attempts_"} {
		if _, err := conn.Exec(ctx, fmt.Sprintf(`ALTER TABLE webhook_ingress.%s OWNER TO %s`, tbl+suffix, dba)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := conn.Exec(ctx, `DELETE FROM webhook_ingress.schema_migrations WHERE version >= 60`); err != nil {
		t.Fatal(err)
	}
	return part
}

// TestMigrateShowsThePartitionsTheUpgradeCouldNotReown (review helper-152,
// fixed; this describes the code before the fix):
//
// Migration 060_partition_owner re-owns every existing partition to
// its parent's owner, and for each one its runner may not take (a partition
// another member of the owner role created) it only RAISEs a NOTICE naming
// the partition and the ALTER TABLE … OWNER TO to run (its header: "a notice
// names them"). But inlet migrate's connection has no notice handler
// (cmd/inlet/migrate.go runMigrate → connectURL; pgx drops notices when
// ConnConfig.OnNotice is nil): the operator sees "applied 060_partition_owner",
// exit 0, and never learns that the upgrade left anything undone. The first
// sign is weeks or months later, when the period expires and the daily inlet
// retention starts failing on it (exit 1 every day) — exactly the surprise 060
// was written to prevent.
//
// Now: inlet migrate prints what 060 could not do (the partitions and the
// ALTER to run) on stderr, as the server's notice, with the exit status
// still 0.
func TestMigrateShowsThePartitionsTheUpgradeCouldNotReown(t *testing.T) {
	t.Parallel()
	conn, _ := sealedOldLog(t,
		`INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, raw_body, signature_verified, received_at) VALUES
			('stripe', 'stripe', 'evt_review152_old', '{}', true, now() - interval '60 days')`,
		`UPDATE webhook_ingress.jobs SET status = 'completed'`,
	)
	_, dba, cron, cronURL := ownerMemberLogins(t, conn)
	part := pre060Period(t, conn, dba, "evt_review152_old")

	// The upgrade: inlet migrate as the CronJob's login (a member of the
	// owner, which may not act as the DBA's login).
	out, errOut, code := runInlet(t, cleanEnv(), "migrate", "--database-url", cronURL)
	t.Logf("inlet migrate as %s: exit %d\nstdout:\n%s\nstderr:\n%s", cron, code, out, errOut)
	if code != 0 || !strings.Contains(out, "applied 060_partition_owner") {
		t.Fatalf("test set-up: inlet migrate as %s: exit %d, want 060 applied", cron, code)
	}
	var owner string
	if err := conn.QueryRow(context.Background(), `SELECT pg_get_userbyid(relowner) FROM pg_class WHERE oid = ('webhook_ingress.' || $1)::regclass`, part).Scan(&owner); err != nil {
		t.Fatal(err)
	}
	if owner != dba {
		t.Fatalf("test set-up: %s owned by %s after 060, want it left to %s", part, owner, dba)
	}
	if !strings.Contains(out+errOut, part) {
		t.Fatalf("inlet migrate applied 060 and exited 0 without a word about %s, which 060 could not give to the owner (it stays %s's, and "+
			"inlet retention will fail on it when it expires): 060's NOTICE naming it and the ALTER to run is dropped by inlet migrate", part, dba)
	}
	// On stderr, as the server's notice, with the ALTER to run; and nothing
	// else there (the index builds' "does not exist, skipping" notices are
	// not the migrations').
	if want := "inlet migrate: notice: partition " + part + " stays " + dba + "'s"; !strings.Contains(errOut, want) ||
		!strings.Contains(errOut, "ALTER TABLE webhook_ingress."+part+" OWNER TO ") {
		t.Errorf("stderr lacks %q and the ALTER TABLE to run:\n%s", want, errOut)
	}
	for _, line := range strings.Split(strings.TrimSpace(errOut), "\n") {
		// (The later migrations run again after the rewind: their IF [NOT]
		// EXISTS say what they skip.)
		if strings.HasSuffix(line, ", skipping") {
			continue
		}
		if !strings.HasPrefix(line, "inlet migrate: notice: partition ") {
			t.Errorf("stderr line %q is not one of 060's notices", line)
		}
	}
}

// TestRetentionHelpMatchesItsExitStatus (review helper-152, fixed; this
// describes the code before the fix):
//
// `inlet retention --help` (cmd/inlet/retention.go runRetention)
// still promises "Exit status 0 even when a period is kept: the report says
// why.", but since e247511 a period kept because one of its partitions
// belongs to another login (ErrPartitionOwner) makes the command exit 1
// (docs/database.md says "the run fails"). A cron wrapper or an alert rule
// written from --help treats exit 1 as "the database is unreachable" rather
// than "a DBA has to run an ALTER", or the operator is surprised by the
// CronJob failing every day.
//
// Now: --help states the exception (a period whose partition another
// role owns is kept and the run exits 1 naming the ALTER TABLE … OWNER TO to
// run), matching docs/database.md.
func TestRetentionHelpMatchesItsExitStatus(t *testing.T) {
	t.Parallel()
	conn, _ := sealedOldLog(t,
		`INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, raw_body, signature_verified, received_at) VALUES
			('stripe', 'stripe', 'evt_review152_help', '{}', true, now() - interval '60 days')`,
		`UPDATE webhook_ingress.jobs SET status = 'completed'`,
	)
	_, dba, _, cronURL := ownerMemberLogins(t, conn)
	part := pre060Period(t, conn, dba, "evt_review152_help")
	if _, err := conn.Exec(context.Background(), `INSERT INTO webhook_ingress.schema_migrations (version, name) SELECT 60, 'partition_owner' UNION ALL SELECT 61, 'claims_hold_new_limits'`); err != nil {
		t.Fatal(err)
	}

	out, errOut, code := runInlet(t, cleanEnv(), "retention", "--max-age", "30d", "--database-url", cronURL)
	t.Logf("inlet retention: exit %d\n%s%s", code, out, errOut)
	if !strings.Contains(out, part) || !strings.Contains(out, "kept") {
		t.Fatalf("test set-up: the report does not show %s kept:\n%s", part, out)
	}
	help, _, hcode := runInlet(t, cleanEnv(), "retention", "--help")
	if hcode != 0 {
		t.Fatalf("retention --help: exit %d", hcode)
	}
	flat := strings.Join(strings.Fields(help), " ")
	if code != 0 && strings.Contains(flat, "Exit status 0 even when a period is kept") && !strings.Contains(flat, "OWNER TO") && !strings.Contains(strings.ToLower(flat), "another role") {
		t.Errorf("inlet retention exited %d with %s kept (another login owns it), while its --help says \"Exit status 0 even when a period is kept: the report says why\" with no exception", code, part)
	}
}
