package streamer_test

import (
	"context"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/streamer"
)

// TestFirstStreamOpenedLateClaimsNothing (review helper-193; this describes
// the code before the fix; it failed then: no claim after Start's, the job
// unpublished 10 s after the stream opened).
//
// Defect: when the replication stream cannot open during Start (Postgres or
// its walsenders unreachable for a moment: connection refused, 53300 too many
// connections / max_wal_senders reached, a CREATE_REPLICATION_SLOT held past
// the 15 s setup timeout by a long transaction), Start goes on polling and
// Replication.run opens the first stream later. If that open creates the slot
// (a first deployment, a promoted standby without it, a slot dropped by an
// operator or by dropIfUnusable), the slot starts at that moment: every job
// committed between Start's claim and the slot's creation is in no stream.
// stream() nudges a claim only for a stream that is not the first
// (`if !first { … r.nudge() }`, streamer/replication.go, in stream(), the
// "replication stream restored" branch), and run() keeps first == true across
// failed opens (streamer/replication.go run(): `first` is only cleared after
// a stream() call). So no claim follows the open and those jobs wait for the
// poll tick (a whole PollInterval; here an hour). doc.go promises "the claim
// each (re)connection runs covers the gap", and stream()'s own comment says
// "unless it was dropped and created afresh: one claim covers that too".
//
// Expected (now): once the stream opens, a claim runs (as after every
// reconnect: run nudges one after each open of its own), so a job committed
// while the stream was not yet open is published within moments.
func TestFirstStreamOpenedLateClaimsNothing(t *testing.T) {
	t.Parallel()
	b := setup(t, "h")
	r := b.replication(t)
	c := b.collect(t, "h")
	ctx := context.Background()

	// The replication connection cannot open yet (the pool can): Start warns
	// and polls; no slot exists yet.
	r.refuse.Store(true)
	s := b.newStreamer(t, r.config(time.Hour)) // polling effectively off
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	waitStats(t, s, 5*time.Second, "the claim at start", func(st streamer.Stats) bool { return st.Claims >= 1 })

	// A job is committed while the stream is not open.
	b.insertEvents(t, 1)
	if up, _ := s.Replication().Connected(); up {
		t.Fatal("stream connected while connects were refused")
	}

	// The replication connection works again: the first stream opens,
	// creating the slot after that commit.
	r.refuse.Store(false)
	waitReplicationConnected(t, s, 0)
	if n := b.count(t, `SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1`, r.slot); n != 1 {
		t.Fatalf("%d slots named %s, want 1", n, r.slot)
	}

	select {
	case <-c.got:
	case <-time.After(10 * time.Second):
		t.Fatalf("10 s after the replication stream opened, the job committed before it is still unpublished "+
			"(it waits for the poll tick, an hour here); stats %+v; want a claim after the stream opens, "+
			"as after every reconnect", s.Stats())
	}
}
