package consumers_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/consumers"
	"github.com/inlet-dev/inlet/consumers/bus"
	"github.com/inlet-dev/inlet/consumers/internal/consumertest"
	"github.com/inlet-dev/inlet/internal/database"
	"github.com/inlet-dev/inlet/internal/pgcluster"
	"github.com/inlet-dev/inlet/internal/pgtest"
	"github.com/inlet-dev/inlet/schema"
)

// A reference waiting for a slot has its lease extended before it runs out
// on the database's clock, also when that clock is far ahead of this
// host's (review helper-270). waitForSlot read what was left of the lease
// as LeaseExpiresAt (the database's clock) less this host's time: with the
// database 10 minutes ahead that was 10 minutes, the first extension came
// LeaseExtend/2 later, and a lease shorter than that ran out while its
// reference waited (the reaper, a consumer being alive, counts an attempt
// never run). Setup: a cluster under libfaketime 10 minutes ahead; handler
// "h" with one slot, held by the first job of a message of two; leases of
// 800 ms, LeaseExtend 2 s. Expected: the waiting job's lease never runs out
// on the database's clock while the first job holds the slot.
func TestWaitingLeaseExtendedOnTheDatabaseClock(t *testing.T) {
	lib := slotFaketime(t)
	ctx := context.Background()
	cluster, err := pgcluster.New(ctx, pgcluster.Config{Dir: filepath.Join(pgtest.TempDir(t), "pg"), Install: true,
		Settings: map[string]string{"fsync": "off"},
		Env:      []string{"LD_PRELOAD=" + lib, "FAKETIME=+10m", "DONT_FAKE_MONOTONIC=1"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := cluster.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cluster.Stop() })
	url := cluster.URL("postgres")
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := schema.Migrate(ctx, conn); err != nil {
		t.Fatal(err)
	}
	var skew float64
	if err := conn.QueryRow(ctx, `SELECT extract(epoch FROM clock_timestamp() - $1::timestamptz)`, time.Now()).Scan(&skew); err != nil {
		t.Fatal(err)
	}
	conn.Close(ctx)
	if skew < 540 || skew > 660 {
		t.Fatalf("the database's clock is %.0fs off this process's, want +600s: libfaketime did not take", skew)
	}
	b := skewedBundle(t, url)
	if _, err := b.Admin.Exec(ctx, `INSERT INTO webhook_ingress.subscriptions (handler) VALUES ('h')`); err != nil {
		t.Fatal(err)
	}

	started, release := make(chan int64, 4), make(chan struct{})
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	var first int64
	cfg := b.config(consumers.Handler{Name: "h", Concurrency: 1, MaxAttempts: 1,
		Func: func(ctx context.Context, e *consumers.Event) error {
			started <- e.JobID
			if e.JobID == first {
				select {
				case <-release:
				case <-time.After(wait):
				}
			}
			return nil
		}})
	cfg.LeaseExtend = 2 * time.Second
	cfg.AliveInterval = 100 * time.Millisecond
	b.start(t, cfg)
	var ids []int64
	for range 2 {
		ids = append(ids, b.JobID(t, b.InsertEvent(t, consumertest.EventParams{}), "h"))
	}
	first = ids[0]
	refs := b.ClaimOnce(t, 800*time.Millisecond)
	if len(refs) != 2 {
		t.Fatalf("claimed %d jobs, want 2", len(refs))
	}
	if refs[0].JobID != first {
		refs[0], refs[1] = refs[1], refs[0]
	}
	if err := b.PublishBatch([]bus.Ref{refs[0], refs[1]}); err != nil {
		t.Fatal(err)
	}
	select {
	case id := <-started:
		if id != first {
			t.Fatalf("job %d started first, want %d", id, first)
		}
	case <-time.After(wait):
		t.Fatal("the first job never started")
	}
	// The second job waits for the slot: its lease, on the database's
	// clock, must not run out (800 ms unextended) for twice LeaseExtend.
	waiting := refs[1].JobID
	var lapsed []string
	for end := time.Now().Add(2 * cfg.LeaseExtend); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		var left float64
		var status string
		if err := b.Admin.QueryRow(ctx, `SELECT status, extract(epoch FROM lease_expires_at - now())::float8
			FROM webhook_ingress.jobs WHERE id = $1`, waiting).Scan(&status, &left); err != nil {
			t.Fatal(err)
		}
		if status != "leased" {
			t.Fatalf("the waiting job is %s, want leased", status)
		}
		if left <= 0 {
			lapsed = append(lapsed, fmt.Sprintf("%.2fs", left))
		}
	}
	if len(lapsed) > 0 {
		t.Errorf("the waiting job's lease ran out on the database's clock while it waited for a slot (left: %v): its first extension was due on this host's clock",
			lapsed)
	}
	close(release)
	for _, id := range ids {
		b.WaitJobStatus(t, id, "completed", wait)
	}
}

// skewedBundle is a consumer test bundle on the database at url.
func skewedBundle(t *testing.T, url string) *testBundle {
	t.Helper()
	ctx := context.Background()
	admin, err := database.Open(ctx, url, database.Options{MaxConns: 4, AppName: "slotwait-admin"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admin.Close)
	worker, err := database.Open(ctx, url, database.Options{Role: "webhook_worker", MaxConns: 8, AppName: "slotwait-worker"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(worker.Close)
	ps := bus.NewGoChannel(slog.New(slog.NewTextHandler(io.Discard, nil)))
	t.Cleanup(func() { _ = ps.Close() })
	b := &testBundle{Bundle: &consumertest.Bundle{Admin: admin, Worker: worker, Bus: ps}, logs: &consumertest.LockedBuffer{}}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("service logs:\n%s", b.logs.String())
		}
	})
	return b
}

// slotFaketime finds libfaketime, skipping the test when it is not
// installed.
func slotFaketime(t *testing.T) string {
	t.Helper()
	m, _ := filepath.Glob("/usr/lib/*/faketime/libfaketime.so.1")
	if len(m) == 0 {
		m, _ = filepath.Glob("/usr/lib/faketime/libfaketime.so.1")
	}
	if len(m) == 0 {
		t.Skip("libfaketime is not installed (apt-get install libfaketime)")
	}
	return m[0]
}
