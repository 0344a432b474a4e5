package streamer_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/inlet-dev/inlet/internal/pgcluster"
	"github.com/inlet-dev/inlet/internal/pgtest"
	"github.com/inlet-dev/inlet/internal/testwait"
	"github.com/inlet-dev/inlet/schema"
	"github.com/inlet-dev/inlet/streamer"
)

// TestSwitchingWakeAwayFromReplicationDropsTheSlot (review helper-281,
// fixed).
// Defect: a streamer switched from `wake: replication` back to `wake: notify`
// (or `poll`) leaves its logical slot behind for good, and nothing in Inlet
// notices it: the slot retains WAL without bound (no max_slot_wal_keep_size
// by default, and inlet.conf ships it commented out), and, worse, the docs
// then lead the operator to take the customer's database down.
// deployments/README.md says "wal_level = logical only for streamer.wake:
// replication" and compose.yaml "wal_level=logical is needed only for
// streamer.wake: replication"; an operator who goes back to notify and
// reverts wal_level restarts PostgreSQL into "FATAL: logical replication slot
// "inlet_streamer" exists, but wal_level < logical": the server does not
// start (PostgreSQL 13-17). No doc says to drop the slot when leaving
// replication (docs/pipeline.md and streamer/doc.go only speak of a replica
// "retired or renamed"), and the notify streamer, which knows slot_name
// (streamer.Section defaults it) and is connected to that very database,
// never looks. Root cause: streamer/streamer.go:Start /
// streamer/section.go:Config (SlotName only passed for wake replication;
// nothing retires the slot).
// Setup: a cluster of the test's own (wal_level=logical); a replication
// streamer runs and stops; a notify streamer with the same slot_name starts
// and runs while WAL moves on; then the operator restarts PostgreSQL with
// wal_level=replica, as the docs say notify needs.
// Expected: the notify streamer retires the inactive slot of its own
// database (or the server would restart); PostgreSQL starts.
// Observed: the slot stays (inactive, restart_lsn held: 24,297,752 bytes after
// 2 WAL switches, growing with every write), and PostgreSQL refuses to start:
// "FATAL: logical replication slot "inlet_streamer" exists, but wal_level <
// logical".
// Fixed: Section.Config passes slot_name whatever the wake source, and a
// streamer without the replication wake source drops, from Start in the
// background (streamer/replication.go:retireSlot), the slot of that name if
// it is a permanent pgoutput slot of this database that nothing reads, as
// the login role (SET LOCAL ROLE NONE; dropping needs REPLICATION), logged
// at Warn with the WAL it retained; one still read is left, logged, and
// looked at again every minute; a role that may not drop it gets a Warn
// naming the statement, never a failed Start. deployments/README.md says to
// drop every logical slot before lowering wal_level.
func TestSwitchingWakeAwayFromReplicationDropsTheSlot(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := filepath.Join(pgtest.TempDir(t), "pg")
	cluster, err := pgcluster.New(ctx, pgcluster.Config{Dir: dir, Install: true,
		Settings: map[string]string{"fsync": "off", "wal_level": "logical"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := cluster.Start(ctx); err != nil {
		t.Fatal(err)
	}
	running := cluster
	t.Cleanup(func() {
		if running != nil {
			_ = running.Stop()
		}
	})
	dbURL := cluster.URL("postgres")
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := schema.Migrate(ctx, conn); err != nil {
		t.Fatal(err)
	}
	conn.Close(ctx)
	b := setupOn(t, dbURL, "h")
	const slot = streamer.DefaultSlotName

	// Weeks on wake: replication.
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("replication", "database")
	u.RawQuery = q.Encode()
	replURL := u.String()
	s1 := b.newStreamer(t, streamer.Config{PollInterval: time.Hour, SlotName: slot, FollowUp: -1,
		ReplicationConnect: func(ctx context.Context) (*pgconn.PgConn, error) { return pgconn.Connect(ctx, replURL) }})
	if err := s1.Start(ctx); err != nil {
		t.Fatal(err)
	}
	waitReplicationConnected(t, s1, 0)
	s1.Stop()
	testwait.Eventually(t, 15*time.Second, "slot inactive after Stop", func() (bool, string) {
		var active bool
		err := b.admin.QueryRow(ctx, `SELECT active FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&active)
		return err == nil && !active, fmt.Sprintf("active=%v err=%v", active, err)
	})

	// Back to the default, wake: notify, same config otherwise (slot_name
	// keeps its default).
	s2 := b.newStreamer(t, streamer.Config{PollInterval: time.Hour, SlotName: slot, FollowUp: -1, ListenConnect: b.listenConnect})
	if err := s2.Start(ctx); err != nil {
		t.Fatal(err)
	}
	waitConnected(t, s2, 0)
	// Life goes on: WAL moves on.
	for i := 0; i < 2; i++ {
		b.insertEvents(t, 50)
		if _, err := b.admin.Exec(ctx, `SELECT pg_switch_wal()`); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.admin.Exec(ctx, `CHECKPOINT`); err != nil {
		t.Fatal(err)
	}
	var present bool
	var retained int64
	// Polled, not required at once: the streamer may retire it in the
	// background. The restart below is the verdict.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		err := b.admin.QueryRow(ctx, `SELECT count(*) > 0, coalesce(max(pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)), 0)::bigint
			FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&present, &retained)
		if err != nil {
			t.Fatal(err)
		}
		if !present || time.Now().After(deadline) {
			break
		}
	}
	s2.Stop()
	t.Logf("after the switch to notify: slot present=%v, retaining %d bytes of WAL", present, retained)
	if present {
		t.Errorf("slot %s still there 10 s after the streamer went back to wake: notify, inactive, retaining %d bytes of WAL (and growing)", slot, retained)
	}
	b.admin.Close()
	b.pool.Close()

	// The operator now reverts wal_level, as the docs say notify needs.
	if err := cluster.Stop(); err != nil {
		t.Fatal(err)
	}
	running = nil
	again, err := pgcluster.New(ctx, pgcluster.Config{Dir: dir, Install: true,
		Settings: map[string]string{"fsync": "off", "wal_level": "replica"}})
	if err != nil {
		t.Fatal(err)
	}
	startCtx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	err = again.Start(startCtx)
	if err == nil {
		running = again
		return
	}
	// The server's own reason, from the log tail the error carries.
	line := err.Error()
	for _, l := range strings.Split(err.Error(), "\n") {
		if strings.Contains(l, "FATAL") && strings.Contains(l, "wal_level") {
			line = strings.TrimSpace(l)
		}
	}
	t.Fatalf("PostgreSQL restarted with wal_level=replica after the streamer went back to wake: notify did not start: %s\n"+
		"(the slot %s the replication wake source left behind was still there, retaining %d bytes of WAL; err is ErrExistingDidNotStart: %v)",
		line, slot, retained, errors.Is(err, pgcluster.ErrExistingDidNotStart))
}
