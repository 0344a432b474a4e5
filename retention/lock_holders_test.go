package retention_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/retention"
)

// A period kept because its locks were not granted names who held them: an
// operator told only "busy, try again later" cannot tell a slow report from
// a session left idle in a transaction for hours (a CI run at 95b394f kept
// every period busy for 25 s and could not say why).
func TestRetentionBusyNamesTheLockHolder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	old := b.event(t, "evt_old", 60*day)
	b.finish(t, old, "completed")
	b.seal(t)
	part := partitionOf(t, b, old)

	cfg, err := pgx.ParseConfig(b.url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeParams["application_name"] = "r-lock-holder"
	holder, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close(ctx)
	var pid int32
	if err := holder.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	tx, err := holder.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	// Only the parent: the drop locks it too, so a session holding any of
	// the parents keeps every period.
	if _, err := tx.Exec(ctx, `SELECT 1 FROM ONLY webhook_ingress.jobs LIMIT 1`); err != nil {
		t.Fatal(err)
	}

	rep := run(t, b.pool, retention.Options{MaxAge: 30 * day, LockTimeout: 300 * time.Millisecond})
	p := verdicts(rep)[part]
	if p.Verdict != retention.Kept {
		t.Fatalf("a period whose parent table another session holds: %+v, want kept as busy", p)
	}
	t.Logf("kept: %s", p.Reason)
	for _, want := range []string{"busy", fmt.Sprintf("pid %d (", pid), "r-lock-holder", "idle in transaction", "AccessShareLock"} {
		if !strings.Contains(p.Reason, want) {
			t.Errorf("busy reason %q does not say %q", p.Reason, want)
		}
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	rep = run(t, b.pool, retention.Options{MaxAge: 30 * day})
	if p := verdicts(rep)[part]; p.Verdict != retention.Dropped {
		t.Fatalf("after the holder ended its transaction: %+v, want dropped", p)
	}
}
