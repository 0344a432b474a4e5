package retention_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inlet-dev/inlet/retention"
	"github.com/inlet-dev/inlet/schema"
)

// TestRetentionDropsPartitionsAnotherOwnerMemberCreated (review helper-143,
// fixed; this describes the code before the fix):
//
// inlet retention accepts any role that "may act as the owner of
// webhook_ingress" (CheckOwner: pg_has_role(current_user, owner, 'USAGE'),
// i.e. a member of the owner role), and so does partition creation
// (inlet migrate, inlet dev, inlet retention's EnsurePartitions). But
// create_partitions makes each new partition owned by the role that happened
// to run it (CREATE TABLE … PARTITION OF sets no owner; 047), and
// partition_status (SELECT count(*) FROM the partition itself) and
// drop_partition (DROP TABLE) need that partition's owner. So once two
// roles have created partitions (a DBA's `inlet retention` by hand as her
// own login, a member of the owner role; the CronJob as another member, or
// as the owner itself), the one that did not create a period can neither
// read nor drop it when it expires: `retention: read partition events_p…:
// permission denied for table events_p… (SQLSTATE 42501)`. That error is
// not one expire classifies as "kept", so Run returns it: the whole run
// fails, every day, nothing after that period is examined or dropped, and
// the dropped periods' dedupe keys are not deleted either (Run returns before
// deleteDueKeys) — the log grows past retention.max_age while CheckOwner had
// said the role may do the job.
//
// Root cause: schema/migrations/047_create_partitions_default_rows.up.sql
// create_partitions (CREATE TABLE … PARTITION OF without an owner) together
// with retention/retention.go CheckOwner (membership accepted) and expire's
// default case (42501 aborts Run).
//
// Now: create_partitions (060) gives every partition it creates to the
// owner of its parent, so a role CheckOwner accepts can drop every period
// partition, whichever member created it.
func TestRetentionDropsPartitionsAnotherOwnerMemberCreated(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	m := ownerMembers(t, b)
	dbaPool, cronPool := m.pool("dba"), m.pool("cron")

	// Weeks ago a DBA ran inlet retention (or inlet migrate) by hand as her
	// own login: the periods of that time were created by her. (Simulated:
	// the empty partitions set-up made are dropped and she creates them from
	// 70 days back, which create_partitions does only when none exist.)
	b.exec(t, `SELECT webhook_ingress.drop_partition(period_start) FROM webhook_ingress.partitions()`)
	if _, err := dbaPool.Exec(ctx, `SELECT count(*) FROM webhook_ingress.create_partitions('week', 2, now() - interval '70 days')`); err != nil {
		t.Fatal(err)
	}
	if n := b.count(t, partitionsNotOwnedSQL); n != 0 {
		t.Errorf("%d partitions %s created are not owned by the owner %s", n, m.role("dba"), m.owner)
	}
	// An old event, finished and sealed: its period is due to go.
	old := b.event(t, "evt_member_old", 60*day)
	b.finish(t, old, "completed")
	b.seal(t)
	oldPart := partitionOf(t, b, old)

	// The daily CronJob runs as another member of the owner role.
	rep, err := retention.Run(ctx, cronPool, retention.Options{MaxAge: 30 * day, Interval: "week", Ahead: 2})
	if err != nil {
		t.Fatalf("inlet retention as %s (a member of the owner %s, which CheckOwner accepted) failed on partitions %s created: %v", m.role("cron"), m.owner, m.role("dba"), err)
	}
	for _, p := range rep.Partitions {
		t.Logf("retention: %s %s %s", p.Name, p.Verdict, p.Reason)
		if p.Name == oldPart && p.Verdict != retention.Dropped {
			t.Errorf("%s (expired, finished, sealed) was not dropped: %s %s", oldPart, p.Verdict, p.Reason)
		}
	}
}

// The upgrade: partitions a member of the owner role created before 060 are
// given to the owner by the migration, when its runner may (the owner
// itself may not take a member's table; a superuser may); one it may not
// is named in a notice and left as it was. inlet retention then keeps that
// period, says whose it is and what to run, goes on with the later periods
// and the dedupe keys, and fails with ErrPartitionOwner; once the ALTER it
// names is run, the period goes.
func TestPartitionOwnerMigrationReownsMembersPartitions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	m := ownerMembers(t, b)
	cronPool := m.pool("cron")
	// Before 060: the periods 60 and 45 days back created by the DBA, and
	// hers; the others by the owner.
	oldest := b.event(t, "evt_reown_oldest", 60*day)
	older := b.event(t, "evt_reown_older", 45*day)
	for _, id := range []int64{oldest, older} {
		b.finish(t, id, "completed")
	}
	b.seal(t)
	oldestPart, olderPart := partitionOf(t, b, oldest), partitionOf(t, b, older)
	giveToDBA := func(part string) {
		t.Helper()
		suffix := strings.TrimPrefix(part, "events_")
		for _, tbl := range []string{"events_", "jobs_", "job_attempts_"} {
			b.exec(t, fmt.Sprintf(`ALTER TABLE webhook_ingress.%s OWNER TO %s`, tbl+suffix, m.role("dba")))
		}
	}
	giveToDBA(oldestPart)
	giveToDBA(olderPart)
	migration := migration060(t)

	// inlet migrate as the CronJob's member role: it may not act as the DBA.
	var mu sync.Mutex
	var notices []string
	conn := m.conn("cron", func(_ *pgconn.PgConn, n *pgconn.Notice) {
		mu.Lock()
		defer mu.Unlock()
		notices = append(notices, n.Message)
	})
	if _, err := conn.Exec(ctx, migration); err != nil {
		t.Fatalf("060 as %s, a member of the owner, with partitions of %s it may not take: %v", m.role("cron"), m.role("dba"), err)
	}
	if n := b.count(t, partitionsNotOwnedSQL); n != 6 {
		t.Fatalf("%d partitions not the owner's after 060 as %s, want the DBA's 6 left as they were", n, m.role("cron"))
	}
	mu.Lock()
	got := strings.Join(notices, "\n")
	mu.Unlock()
	if !strings.Contains(got, oldestPart) || !strings.Contains(got, "ALTER TABLE webhook_ingress."+oldestPart+" OWNER TO") {
		t.Errorf("060's notices %q do not name %s and the ALTER to run", got, oldestPart)
	}

	// inlet retention as the CronJob: both DBA periods kept, named, and the
	// run fails, after the rest was done.
	beforeLog := b.count(t, `SELECT count(*) FROM webhook_ingress.retention_log`)
	rep, err := retention.Run(ctx, cronPool, retention.Options{MaxAge: 30 * day, Interval: "week", Ahead: 2})
	if !errors.Is(err, retention.ErrPartitionOwner) {
		t.Fatalf("retention as %s with the DBA's periods: %v, want ErrPartitionOwner", m.role("cron"), err)
	}
	if rep.Now.IsZero() || rep.Cutoff == nil {
		t.Fatalf("no report with the error: %+v", rep)
	}
	t.Logf("retention: %v", err)
	for _, want := range []string{oldestPart, m.role("dba"), "ALTER TABLE webhook_ingress." + `"` + oldestPart + `"` + " OWNER TO"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not say %q: %v", want, err)
		}
	}
	kept := map[string]string{}
	dropped := 0
	for _, p := range rep.Partitions {
		switch p.Verdict {
		case retention.Kept:
			kept[p.Name] = p.Reason
		case retention.Dropped:
			dropped++
		}
	}
	for _, part := range []string{oldestPart, olderPart} {
		if r, ok := kept[part]; !ok || !strings.Contains(r, m.role("dba")) || !strings.Contains(r, "OWNER TO") {
			t.Errorf("%s: kept %v, reason %q; want kept, naming %s and what to run", part, ok, r, m.role("dba"))
		}
	}
	// The empty expired periods between and after them went all the same.
	if dropped == 0 || b.count(t, `SELECT count(*) FROM webhook_ingress.retention_log`) != beforeLog+int64(dropped) {
		t.Errorf("%d periods dropped beside the DBA's, want the other expired ones: %+v", dropped, rep.Partitions)
	}

	// 060 as a superuser (or the ALTERs the error names, as the DBA) gives
	// them to the owner; the next run drops them.
	b.exec(t, migration)
	if n := b.count(t, partitionsNotOwnedSQL); n != 0 {
		t.Fatalf("%d partitions not the owner's after 060 as a superuser", n)
	}
	rep = run(t, cronPool, retention.Options{MaxAge: 30 * day})
	for _, part := range []string{oldestPart, olderPart} {
		if p := verdicts(rep)[part]; p.Verdict != retention.Dropped {
			t.Errorf("%s after 060 as a superuser: %+v, want dropped", part, p)
		}
	}
}

// partitionsNotOwnedSQL counts the period and default partitions owned by
// another role than their parent's owner.
const partitionsNotOwnedSQL = `SELECT count(*) FROM pg_inherits i JOIN pg_class pt ON pt.oid = i.inhparent JOIN pg_class c ON c.oid = i.inhrelid
	WHERE pt.oid IN ('webhook_ingress.events'::regclass, 'webhook_ingress.jobs'::regclass, 'webhook_ingress.job_attempts'::regclass)
	  AND c.relowner <> pt.relowner`

// migration060 is the SQL of 060_partition_owner, which the tests run again
// on a migrated database (it may run any number of times).
func migration060(t *testing.T) string {
	t.Helper()
	ms, err := schema.Migrations()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if m.Version == 60 && m.Name == "partition_owner" {
			return m.SQL
		}
	}
	t.Fatal("no migration 060_partition_owner")
	return ""
}

// members are login roles made members of the owner of webhook_ingress
// (which CheckOwner accepts), by short name.
type members struct {
	t     *testing.T
	b     *bundle
	owner string
	roles map[string]string
	pools map[string]*pgxpool.Pool
}

// ownerMembers creates the login roles dba and cron, members of the owner,
// dropped when the test ends.
func ownerMembers(t *testing.T, b *bundle) *members {
	t.Helper()
	ctx := context.Background()
	m := &members{t: t, b: b, roles: map[string]string{}, pools: map[string]*pgxpool.Pool{}}
	if err := b.pool.QueryRow(ctx, `SELECT pg_get_userbyid(relowner) FROM pg_class WHERE oid = 'webhook_ingress.events'::regclass`).Scan(&m.owner); err != nil {
		t.Fatal(err)
	}
	suffix := fmt.Sprintf("%d_%d", os.Getpid(), time.Now().UnixNano()%1_000_000_000)
	for _, name := range []string{"dba", "cron"} {
		r := "member_" + name + "_" + suffix
		m.roles[name] = r
		b.exec(t, fmt.Sprintf(`CREATE ROLE %s LOGIN`, r))
		b.exec(t, fmt.Sprintf(`GRANT %s TO %s`, m.owner, r)) // a member of the owner: CheckOwner accepts it
		t.Cleanup(func() {
			c := context.Background()
			_, _ = b.pool.Exec(c, fmt.Sprintf(`REASSIGN OWNED BY %s TO %s`, r, m.owner))
			_, _ = b.pool.Exec(c, fmt.Sprintf(`DROP OWNED BY %s`, r))
			_, _ = b.pool.Exec(c, fmt.Sprintf(`DROP ROLE IF EXISTS %s`, r))
		})
		if err := retention.CheckOwner(ctx, m.pool(name)); err != nil {
			t.Fatalf("test set-up: a member of %s is not accepted: %v", m.owner, err)
		}
	}
	return m
}

func (m *members) role(name string) string { return m.roles[name] }

// pool is a pool of the member name's connections.
func (m *members) pool(name string) *pgxpool.Pool {
	m.t.Helper()
	if p, ok := m.pools[name]; ok {
		return p
	}
	cfg, err := pgxpool.ParseConfig(m.b.url)
	if err != nil {
		m.t.Fatal(err)
	}
	cfg.ConnConfig.User = m.roles[name]
	p, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		m.t.Fatal(err)
	}
	m.t.Cleanup(p.Close)
	m.pools[name] = p
	return p
}

// conn connects one session as the member name, its notices to onNotice.
func (m *members) conn(name string, onNotice pgconn.NoticeHandler) *pgx.Conn {
	m.t.Helper()
	cfg, err := pgx.ParseConfig(m.b.url)
	if err != nil {
		m.t.Fatal(err)
	}
	cfg.User, cfg.OnNotice = m.roles[name], onNotice
	c, err := pgx.ConnectConfig(context.Background(), cfg)
	if err != nil {
		m.t.Fatal(err)
	}
	m.t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}
