package streamer_test

import (
	"context"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/consumers/bus"
	"github.com/inlet-dev/inlet/internal/pgcluster"
	"github.com/inlet-dev/inlet/internal/pgtest"
	"github.com/inlet-dev/inlet/schema"
	"github.com/inlet-dev/inlet/schema/queries"
	"github.com/inlet-dev/inlet/streamer"
)

// TestCrashLosesOnlyAsyncLeases: a claim commits without waiting for its WAL
// to reach the disk (asyncCommit), so a crash of the database server can
// undo it. What it undoes must be harmless: the job is due again with its
// attempt not counted, the reference already published is fenced out (its
// outcome records nothing), and the next claim leases the job under a new
// token whose outcome is recorded once. The crash is one that loses the WAL
// not yet written: the WAL writer is stopped (SIGSTOP) before the claim and
// every server process is then killed, as when the machine itself fails
// (a PostgreSQL process crash alone keeps what reached the OS). The event,
// committed synchronously before, survives.
func TestCrashLosesOnlyAsyncLeases(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, crash := crashableDatabase(t)
	job := func(b *testBundle) (status string, attempts int32) {
		t.Helper()
		if err := b.admin.QueryRow(ctx, `SELECT status::text, attempt_count FROM webhook_ingress.jobs`).Scan(&status, &attempts); err != nil {
			t.Fatal(err)
		}
		return status, attempts
	}
	complete := func(b *testBundle, r bus.Ref) bool {
		t.Helper()
		ids, err := queries.New(b.admin).CompleteJobs(ctx, queries.CompleteJobsParams{Column1: []int64{r.JobID},
			Column2: []int32{int32(r.Attempt)}, Column3: []time.Time{r.EventReceivedAt}, Column4: []time.Time{r.LeasedAt}, Column5: "consumer-test"})
		if err != nil {
			t.Fatal(err)
		}
		return len(ids) == 1
	}

	b := setupOn(t, url, "billing")
	b.insertEvents(t, 1)
	crash.holdWAL(t, b)
	c := b.collect(t, "billing")
	s := b.newStreamer(t, streamer.Config{})
	if n, err := s.ClaimOnce(ctx); err != nil || n != 1 {
		t.Fatalf("claim: %d, %v", n, err)
	}
	lost := c.wait(t, 1, 10*time.Second)[0]
	if st, n := job(b); st != "leased" || n != 1 {
		t.Fatalf("after the claim: job %s, attempt %d; want leased, attempt 1", st, n)
	}
	crash.now(t)
	b = setupOn(t, url) // new pools: the old ones' connections died with the server
	if st, n := job(b); st != "pending" || n != 0 {
		t.Fatalf("after the crash: job %s, attempt %d; want pending, attempt 0 (the claim undone)", st, n)
	}
	if complete(b, lost) {
		t.Fatal("the lost lease's outcome was recorded after the crash")
	}
	c = b.collect(t, "billing")
	s = b.newStreamer(t, streamer.Config{})
	if n, err := s.ClaimOnce(ctx); err != nil || n != 1 {
		t.Fatalf("claim after the crash: %d, %v", n, err)
	}
	again := c.wait(t, 1, 10*time.Second)[0]
	if again.Attempt != 1 || !again.LeasedAt.After(lost.LeasedAt) {
		t.Fatalf("the claim after the crash: attempt %d leased at %s; want attempt 1 under a new token (the lost one: %s)",
			again.Attempt, again.LeasedAt, lost.LeasedAt)
	}
	if complete(b, lost) {
		t.Fatal("the lost lease's outcome was recorded over the new lease")
	}
	if !complete(b, again) {
		t.Fatal("the new lease's outcome was not recorded")
	}
	if st, n := job(b); st != "completed" || n != 1 {
		t.Fatalf("at the end: job %s, attempt %d; want completed, attempt 1", st, n)
	}
}

// crashable is a cluster of a test's own that can crash losing the WAL of
// asynchronous commits.
type crashable struct{ cluster *pgcluster.Cluster }

// crashableDatabase starts a migrated cluster of the test's own where
// nothing but a commit's own flush writes WAL (no autovacuum, no background
// writer, the WAL writer asleep for 10 s), and returns its URL.
func crashableDatabase(t *testing.T) (string, *crashable) {
	t.Helper()
	ctx := context.Background()
	cluster, err := pgcluster.New(ctx, pgcluster.Config{Dir: filepath.Join(pgtest.TempDir(t), "pg"), Install: true,
		Settings: map[string]string{"autovacuum": "off", "bgwriter_lru_maxpages": "0", "wal_writer_delay": "10s"}})
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
	defer conn.Close(ctx)
	if _, err := schema.Migrate(ctx, conn); err != nil {
		t.Fatal(err)
	}
	return url, &crashable{cluster: cluster}
}

// holdWAL stops the WAL writer (SIGSTOP): from then on an asynchronous
// commit's WAL stays in shared memory until a synchronous commit flushes it.
func (c *crashable) holdWAL(t *testing.T, b *testBundle) {
	t.Helper()
	var walWriter int
	if err := b.admin.QueryRow(context.Background(), `SELECT pid FROM pg_stat_activity WHERE backend_type = 'walwriter'`).Scan(&walWriter); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(walWriter, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
}

// now kills every server process, as when the machine fails (what shared
// memory held is lost), and starts the server again (crash recovery).
func (c *crashable) now(t *testing.T) {
	t.Helper()
	if err := c.cluster.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := c.cluster.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
}
