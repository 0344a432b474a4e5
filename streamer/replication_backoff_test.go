package streamer_test

import (
	"context"
	"testing"
	"time"
)

// TestReplayedTransactionDefeatsBackoff (review helper-159, fixed; this describes the code before the fix):
// dd24f25 counts a stream as "lasted" (run resets the backoff to
// 100 ms) as soon as it decoded one transaction (d.commits > 0). But a
// stream resumes at the slot's confirmed position, and the streamer confirms
// what it processed only every statusInterval (1 s). So when a stream keeps
// failing shortly after it opens and there is one committed-but-unconfirmed
// transaction before the failure point, every new stream replays that same
// transaction, counts as "lasted", and the backoff is reset each time: the
// hot loop dd24f25 meant to remove (TestReplicationStreamDyingAtOnceBacksOff)
// is back, with a counted replication wake-up and a claim for every round.
// Persistent faults of that shape: a walsender that dies on the change after
// (disk full while spilling a large transaction to pg_replslot, out of
// memory, a publication error the flag does not recognise, see
// pubgone_lang_review_test.go) or a watchdog that terminates walsenders.
// Here a watchdog terminates every walsender once it has sent transaction A.
//
// Now: a stream that does not make progress (delivers nothing new and
// dies within moments) is a failed attempt, and the documented backoff
// (100 ms doubling to 10 s, about 8 attempts in 10 s) applies.
func TestReplayedTransactionDefeatsBackoff(t *testing.T) {
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

	// A watchdog ends each walsender of this database's slot once it has
	// sent everything up to (and including) transaction A, i.e. before the
	// streamer's 1 s status report can confirm A.
	target := b.walLSN(t, `SELECT pg_current_wal_lsn()::text`)
	kctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for kctx.Err() == nil {
			_, _ = b.admin.Exec(kctx, `SELECT pg_terminate_backend(r.pid) FROM pg_stat_replication r
				JOIN pg_stat_activity a USING (pid)
				WHERE a.datname = current_database() AND r.sent_lsn >= $1::pg_lsn`, target)
			time.Sleep(5 * time.Millisecond)
		}
	}()
	b.insertEvents(t, 1) // transaction A: committed after target
	_, before := s.Replication().Connected()
	wakeBefore := s.Stats().ReplicationWakeups
	const window = 10 * time.Second
	time.Sleep(window)
	stop()
	<-done
	_, after := s.Replication().Connected()
	st := s.Stats()
	// With the documented backoff (100 ms doubling to 10 s, jitter halving
	// each wait at most) 10 s allow about 8 attempts.
	if n := after - before; n > 15 {
		t.Fatalf("%d reconnects in %s (and %d replication wake-ups for one transaction) while every stream died right after replaying the same unconfirmed transaction:\n"+
			"each replay counts as 'delivered a transaction', so the backoff is reset every time (hot loop); want it to keep doubling up to 10 s. stats %+v",
			n, window, st.ReplicationWakeups-wakeBefore, st)
	}
}
