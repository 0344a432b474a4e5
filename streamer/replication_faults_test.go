package streamer_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/internal/testlog"
	"github.com/inlet-dev/inlet/internal/testwait"
	"github.com/inlet-dev/inlet/streamer"
)

// TestReplicationPublicationDroppedWhileRunning (review helper-156, fixed;
// this describes the code before the fix): the publication inlet_jobs dropped
// while a streamer runs (an operator's clean-up, a migration that drops and
// recreates it in two transactions) makes the replication wake source fail
// for ever, although the streamer recreates the publication itself. The
// walsender's next decoded change errors with "publication "inlet_jobs" does
// not exist" (SQLSTATE 42704); run reconnects, open -> ensurePublication
// creates the publication afresh, and START_REPLICATION resumes from the
// slot's confirmed position, which is before the DROP. pgoutput looks the
// publication up with the historic catalog snapshot of the WAL it decodes
// (PostgreSQL 13-17), where the publication does not exist between the DROP
// and the re-CREATE: the same error comes back on every reconnect, and the
// slot never advances. The streamer logs "replication stream lost; polling
// covers the gap" at Error for ever, several times a second (see
// TestReplicationStreamDyingAtOnceBacksOff), wake-ups fall back to the poll
// interval, and readyz/metrics show nothing.
//
// Now: the wake source is only a hint (like a lost slot): when the stream
// fails with "publication ... does not exist" (logged as a warning, not a
// setup error), the next open recreates the publication if it is still
// missing, then drops the slot, which cannot get past that WAL, and creates
// it afresh (dropIfUnusable, with a warning; the claim each reconnect runs
// covers the gap), and replication wake-ups resume.
func TestReplicationPublicationDroppedWhileRunning(t *testing.T) {
	t.Parallel()
	b := setup(t, "h")
	r := b.replication(t)
	c := b.collect(t, "h")
	ctx := context.Background()

	s := b.newStreamer(t, r.config(time.Hour)) // no poll: replication alone wakes it
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	waitReplicationConnected(t, s, 0)
	b.insertEvents(t, 1)
	c.wait(t, 1, 5*time.Second)
	waitStats(t, s, 5*time.Second, "a replication wake-up", func(st streamer.Stats) bool { return st.ReplicationWakeups >= 1 })
	// Confirmed past that insert: a reconnect does not replay it (a wake-up
	// that would pass for a working stream).
	target := b.walLSN(t, `SELECT pg_current_wal_lsn()::text`)
	testwait.Eventually(t, 25*time.Second, "confirmed_flush_lsn to pass "+target, func() (bool, string) {
		lsn := b.walLSN(t, confirmedFlushSQL, r.slot)
		return b.lsnAtLeast(t, lsn, target), "confirmed " + lsn
	})

	// The operator drops the publication (say, to recreate it with other
	// options); a job is committed meanwhile.
	if _, err := b.admin.Exec(ctx, `DROP PUBLICATION inlet_jobs`); err != nil {
		t.Fatal(err)
	}
	b.insertEvents(t, 1)
	// The stream fails; the streamer reconnects and recreates the publication.
	testwait.Eventually(t, 15*time.Second, "the publication recreated by the streamer", func() (bool, string) {
		n := b.count(t, `SELECT count(*) FROM pg_publication WHERE pubname = 'inlet_jobs'`)
		return n == 1, fmt.Sprintf("%d publications", n)
	})

	// From now on, new jobs must wake it by replication again.
	deadline := time.Now().Add(30 * time.Second)
	before := s.Stats().ReplicationWakeups
	for time.Now().Before(deadline) {
		b.insertEvents(t, 1)
		time.Sleep(time.Second)
		if s.Stats().ReplicationWakeups > before {
			return
		}
	}
	up, reconnects := s.Replication().Connected()
	var active bool
	var confirmed string
	_ = b.admin.QueryRow(ctx, `SELECT active, coalesce(confirmed_flush_lsn::text, '') FROM pg_replication_slots WHERE slot_name = $1`, r.slot).Scan(&active, &confirmed)
	t.Fatalf("no replication wake-up in 30 s after the publication was dropped and recreated (connected=%v, reconnects=%d, slot active=%v confirmed=%s, stats %+v):\n"+
		"the slot resumes before the DROP and pgoutput fails on it for ever; want the slot recreated and wake-ups back",
		up, reconnects, active, confirmed, s.Stats())
}

// TestReplicationStreamDyingAtOnceBacksOff (review helper-156, fixed; this
// describes the code before the fix): when the replication stream opens
// (START_REPLICATION succeeds) and then fails at once, every time (a decoding
// error the walsender hits on the first change, such as "publication does not
// exist" in the test above, a walsender killed right away by a watchdog, out
// of memory decoding a huge transaction), run resets its backoff to 100 ms
// after each such "stream" (replication.go, run: "It was up: start the
// backoff afresh" after any successful open). The streamer then reconnects
// ~10 times a second for ever: a new replication connection, a new walsender
// decoding from the slot's restart_lsn, a claim statement (the nudge on
// "stream restored") and an ERROR/INFO log pair each time, so a persistent
// fault turns into load on the primary and a flood of logs rather than the
// documented exponential backoff (up to 10 s).
//
// Now: a stream that ended before it delivered a transaction or lasted
// replicationMaxBackoff counts as a failed attempt: the backoff keeps
// doubling up to 10 s.
func TestReplicationStreamDyingAtOnceBacksOff(t *testing.T) {
	t.Parallel()
	b := setup(t, "h")
	r := b.replication(t)
	ctx := context.Background()
	s := b.newStreamer(t, r.config(time.Hour))
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	waitReplicationConnected(t, s, 0)

	// Something ends every stream of this database right after it opens.
	kctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for kctx.Err() == nil {
			_, _ = b.admin.Exec(kctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
				WHERE backend_type = 'walsender' AND datname = current_database() AND query LIKE 'START_REPLICATION%'`)
			time.Sleep(5 * time.Millisecond)
		}
	}()
	_, before := s.Replication().Connected()
	const window = 10 * time.Second
	time.Sleep(window)
	stop()
	<-done
	_, after := s.Replication().Connected()
	// With the documented backoff (100 ms doubling to 10 s, jitter halving
	// each wait at most) 10 s allow about 8 attempts.
	if n := after - before; n > 15 {
		t.Fatalf("%d reconnects in %s while every stream died at once: the backoff is reset after each stream that merely opened (hot loop); want it to keep doubling up to 10 s", n, window)
	}
}

// TestReplicationPublicationAlteredWhileRunningIsNoticed (review helper-156,
// fixed; this describes the code before the fix): the publication is checked
// only when a stream opens (checkPublication in open). If it stops publishing
// webhook_ingress.jobs while a streamer runs (ALTER PUBLICATION inlet_jobs
// DROP TABLE / SET TABLE another table, an operator's or a tool's change),
// the stream stays up (Connected() true), no job ever wakes the streamer
// again, and nothing is logged: latency silently falls from ~10 ms to the
// poll interval for as long as the process lives. The very same state makes
// the next Start fail with ErrReplicationSetup ("publication inlet_jobs
// exists without webhook_ingress.jobs"), so the misconfiguration surfaces
// only at the next deploy, possibly months later, as a streamer that refuses
// to start.
//
// Now: a stream that is up re-checks the publication on the streamer's pool
// every 30 s (recheckPublication, checkPublication's rules); when Start would
// refuse it, the stream ends with that ErrReplicationSetup error, which run
// logs at Error, and it keeps retrying with backoff while polling covers.
func TestReplicationPublicationAlteredWhileRunningIsNoticed(t *testing.T) {
	t.Parallel()
	b := setup(t, "h")
	r := b.replication(t)
	ctx := context.Background()
	cfg := r.config(time.Hour)
	cfg.Pool, cfg.Publisher, cfg.MinLeasedPerHandler = b.pool, b.pubsub, 1<<20
	logs := &testlog.Buffer{}
	cfg.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	s, err := streamer.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	waitReplicationConnected(t, s, 0)
	b.insertEvents(t, 1)
	waitStats(t, s, 5*time.Second, "a replication wake-up", func(st streamer.Stats) bool { return st.ReplicationWakeups >= 1 })

	if _, err := b.admin.Exec(ctx, `CREATE TABLE public.not_jobs (x int); ALTER PUBLICATION inlet_jobs SET TABLE public.not_jobs`); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for time.Since(start) < 35*time.Second {
		b.insertEvents(t, 1)
		time.Sleep(time.Second)
		if l := logs.String(); strings.Contains(l, "level=ERROR") && strings.Contains(l, "exists without webhook_ingress.jobs") {
			return // noticed
		}
	}
	up, n := s.Replication().Connected()
	t.Fatalf("35 s after the publication stopped publishing webhook_ingress.jobs: no ERROR logged, stream connected=%v (reconnects %d), stats %+v;\n"+
		"a restart would now fail Start with ErrReplicationSetup, but the running streamer silently polls. Log:\n%s", up, n, s.Stats(), logs.String())
}
