package streamer

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inlet-dev/inlet/internal/database"
	"github.com/inlet-dev/inlet/internal/pgtest"
	"github.com/inlet-dev/inlet/internal/testlog"
	"github.com/inlet-dev/inlet/internal/testwait"
)

// retireBundle is a migrated database, its admin pool, and a pool as the
// streamer's (webhook_streamer, by SET ROLE).
type retireBundle struct {
	url   string
	admin *pgxpool.Pool
	pool  *pgxpool.Pool
	logs  *testlog.Buffer
	log   *slog.Logger
}

func setupRetire(t *testing.T) *retireBundle {
	t.Helper()
	ctx := context.Background()
	b := &retireBundle{url: pgtest.NewDatabase(t), logs: &testlog.Buffer{}}
	var err error
	if b.admin, err = pgxpool.New(ctx, b.url); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.admin.Close)
	if b.pool, err = database.Open(ctx, b.url, database.Options{Role: "webhook_streamer", MaxConns: 2}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.pool.Close)
	b.log = slog.New(slog.NewTextHandler(b.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("retireSlot log:\n%s", b.logs.String())
		}
	})
	return b
}

// slotName is a slot name of the test's own: slots are cluster-wide.
func slotName(what string) string {
	return fmt.Sprintf("retire_%s_%06x", what, rand.N(1<<24))
}

// createSlot creates a permanent logical slot with plugin in the database
// admin is a pool on, dropped at the end of the test if still there.
func createSlot(t *testing.T, admin *pgxpool.Pool, slot, plugin string) {
	t.Helper()
	ctx := context.Background()
	if _, err := admin.Exec(ctx, `SELECT pg_create_logical_replication_slot($1, $2)`, slot, plugin); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = admin.Exec(context.Background(), `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1 AND NOT active`, slot)
	})
}

func (b *retireBundle) slotPresent(t *testing.T, slot string) bool {
	t.Helper()
	var n int
	if err := b.admin.QueryRow(context.Background(), `SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n > 0
}

// runRetire runs retireSlot on pool until it returns; the channel closes
// then.
func runRetire(t *testing.T, pool *pgxpool.Pool, slot string, recheck time.Duration, log *slog.Logger) <-chan struct{} {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		retireSlot(ctx, pool, slot, recheck, log)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return done
}

func waitDone(t *testing.T, done <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		t.Fatalf("retireSlot did not return within 15s: %s", what)
	}
}

// A slot a replica still reads (one still on wake: replication during a
// rollout) is left, said once, and dropped once nothing reads it.
func TestRetireSlotLeavesAReadSlotAndDropsItOnceUnread(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupRetire(t)
	slot := slotName("read")
	createSlot(t, b.admin, slot, "pgoutput")
	u, err := url.Parse(b.url)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("replication", "database")
	u.RawQuery = q.Encode()
	conn := mustConnect(t, u.String())
	if err := ensurePublication(ctx, conn); err != nil {
		t.Fatal(err)
	}
	if err := pglogrepl.StartReplication(ctx, conn, slot, 0, pglogrepl.StartReplicationOptions{
		Mode: pglogrepl.LogicalReplication, PluginArgs: []string{"proto_version '1'", "publication_names '" + Publication + "'"},
	}); err != nil {
		t.Fatal(err)
	}

	done := runRetire(t, b.pool, slot, 100*time.Millisecond, b.log)
	testwait.Eventually(t, 10*time.Second, "the read slot said to be left", func() (bool, string) {
		return strings.Contains(b.logs.String(), "is still read"), b.logs.String()
	})
	time.Sleep(500 * time.Millisecond) // several rechecks
	if !b.slotPresent(t, slot) {
		t.Fatal("a slot a replica still reads was dropped")
	}
	if n := strings.Count(b.logs.String(), "is still read"); n != 1 {
		t.Errorf("the read slot was reported %d times, want once", n)
	}

	closeConn(conn) // the replica on replication stops
	waitDone(t, done, "after its reader stopped")
	if b.slotPresent(t, slot) {
		t.Fatal("slot still there after its reader stopped and retireSlot returned")
	}
	if !strings.Contains(b.logs.String(), "level=WARN msg=\"replication slot dropped") {
		t.Errorf("no warning saying the slot was dropped:\n%s", b.logs.String())
	}
}

// A login role that may not drop slots (no REPLICATION, not a superuser)
// is a warning naming the statement to run; the slot stays, nothing fails.
func TestRetireSlotWithoutTheRightToDropWarnsWithTheStatement(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupRetire(t)
	slot := slotName("noperm")
	createSlot(t, b.admin, slot, "pgoutput")
	role := slotName("role")
	if _, err := b.admin.Exec(ctx, `CREATE ROLE `+role+` LOGIN NOREPLICATION IN ROLE webhook_streamer`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = b.admin.Exec(context.Background(), `DROP ROLE IF EXISTS `+role) })
	u, err := url.Parse(b.url)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(role)
	pool, err := database.Open(ctx, u.String(), database.Options{Role: "webhook_streamer", MaxConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()

	waitDone(t, runRetire(t, pool, slot, 100*time.Millisecond, b.log), "with a role that may not drop the slot")
	if !b.slotPresent(t, slot) {
		t.Fatal("slot gone, though the role may not drop it")
	}
	logs := b.logs.String()
	for _, want := range []string{"level=WARN", "not dropped", "REPLICATION", `drop_with="SELECT pg_drop_replication_slot('` + slot + `')"`, "42501"} {
		if !strings.Contains(logs, want) {
			t.Errorf("warning lacks %q:\n%s", want, logs)
		}
	}
}

// A slot of that name that is not one this database's wake: replication
// made (another plugin; another database's) is left alone.
func TestRetireSlotLeavesSlotsThatAreNotInlets(t *testing.T) {
	t.Parallel()
	b := setupRetire(t)
	other := setupRetire(t)
	for _, c := range []struct {
		name, plugin string
		admin        *pgxpool.Pool
	}{
		{"test_decoding", "test_decoding", b.admin},
		{"other_database", "pgoutput", other.admin},
	} {
		t.Run(c.name, func(t *testing.T) {
			slot := slotName(c.name)
			createSlot(t, c.admin, slot, c.plugin)
			waitDone(t, runRetire(t, b.pool, slot, 100*time.Millisecond, b.log), "for a slot not Inlet's")
			if !b.slotPresent(t, slot) {
				t.Fatalf("slot %s (%s) dropped", slot, c.name)
			}
			if !strings.Contains(b.logs.String(), "left alone") {
				t.Errorf("not said to be left alone:\n%s", b.logs.String())
			}
		})
	}
}

// No slot of that name: retireSlot returns at once, saying nothing.
func TestRetireSlotWithoutASlotReturns(t *testing.T) {
	t.Parallel()
	b := setupRetire(t)
	waitDone(t, runRetire(t, b.pool, slotName("none"), 100*time.Millisecond, b.log), "without a slot")
	if s := b.logs.String(); s != "" {
		t.Errorf("logged without a slot:\n%s", s)
	}
}
