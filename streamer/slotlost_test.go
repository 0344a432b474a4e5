package streamer_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/internal/testwait"
	"github.com/inlet-dev/inlet/streamer"
)

// TestReplicationInvalidatedSlotIsRecreated (review helper-74).
//
// Defect: a replication slot invalidated by max_slot_wal_keep_size (which
// deployments/README.md and streamer/doc.go tell operators to set, "so that an
// abandoned slot cannot fill the disk") makes the streamer refuse to start:
// START_REPLICATION fails with SQLSTATE 55000 ("can no longer get changes from
// replication slot"), explain() (replication.go, the "55000" case) marks it
// ErrReplicationSetup with the misleading hint "logical replication needs
// wal_level = logical (a restart) and a slot created in this database", and
// Start returns it. A streamer that was merely down for a while (the very case
// the cap is for) thus stays down after a restart, and a running one whose
// slot is invalidated (run's reconnect loop) retries forever at Error level,
// polling only. Nothing in the code drops and recreates the slot.
//
// Expected: the wake source is only a hint ("the choice is about latency and
// cost, never about data"), and the streamer already recreates a slot that
// vanished (ensureSlot: a promoted standby, a drop) because the claim each
// (re)connection runs covers the gap. An invalidated slot is the same case:
// Start succeeds, the streamer drops the lost slot, creates it afresh (with a
// Warn), and replication wake-ups work again.
//
// Not parallel: it sets max_slot_wal_keep_size on the test cluster (reset at
// the end).
func TestReplicationInvalidatedSlotIsRecreated(t *testing.T) {
	b := setup(t, "h")
	r := b.replication(t)
	ctx := context.Background()

	// A streamer creates its slot, runs, and is stopped (a replica down for
	// maintenance).
	s1 := b.newStreamer(t, r.config(time.Hour))
	if err := s1.Start(ctx); err != nil {
		t.Fatal(err)
	}
	waitReplicationConnected(t, s1, 0)
	s1.Stop()
	testwait.Eventually(t, 10*time.Second, "slot inactive after Stop", func() (bool, string) {
		var active bool
		err := b.admin.QueryRow(ctx, `SELECT active FROM pg_replication_slots WHERE slot_name = $1`, r.slot).Scan(&active)
		return err == nil && !active, fmt.Sprintf("active=%v err=%v", active, err)
	})

	// The operator's cap, as deployments/postgres/inlet.conf suggests (small
	// here so the test needs little WAL).
	if _, err := b.admin.Exec(ctx, `ALTER SYSTEM SET max_slot_wal_keep_size = '1MB'`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = b.admin.Exec(context.Background(), `ALTER SYSTEM RESET max_slot_wal_keep_size`)
		_, _ = b.admin.Exec(context.Background(), `SELECT pg_reload_conf()`)
	})
	if _, err := b.admin.Exec(ctx, `SELECT pg_reload_conf()`); err != nil {
		t.Fatal(err)
	}
	// While it is down, WAL moves on past the cap and a checkpoint
	// invalidates the slot.
	testwait.Eventually(t, 30*time.Second, "slot invalidated (wal_status lost)", func() (bool, string) {
		for i := 0; i < 3; i++ {
			if _, err := b.admin.Exec(ctx, `CREATE TEMP TABLE IF NOT EXISTS review_wal (x text); INSERT INTO review_wal SELECT repeat('x', 1000) FROM generate_series(1, 100); SELECT pg_switch_wal()`); err != nil {
				return false, err.Error()
			}
		}
		if _, err := b.admin.Exec(ctx, `CHECKPOINT`); err != nil {
			return false, err.Error()
		}
		var status string
		err := b.admin.QueryRow(ctx, `SELECT coalesce(wal_status, '') FROM pg_replication_slots WHERE slot_name = $1`, r.slot).Scan(&status)
		return err == nil && status == "lost", fmt.Sprintf("wal_status=%q err=%v", status, err)
	})

	// The replica comes back: it must start and wake on replication again.
	s2 := b.newStreamer(t, r.config(time.Hour))
	if err := s2.Start(ctx); err != nil {
		t.Fatalf("Start after the slot was invalidated by max_slot_wal_keep_size: %v\n"+
			"want: the lost slot dropped and created afresh (as a vanished slot is), replication wake-ups working", err)
	}
	defer s2.Stop()
	waitReplicationConnected(t, s2, 0)
	b.insertEvents(t, 1)
	waitStats(t, s2, 10*time.Second, "a replication wake-up on the recreated slot", func(st streamer.Stats) bool {
		return st.ReplicationWakeups >= 1
	})
}
