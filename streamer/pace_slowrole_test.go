package streamer

import (
	"testing"
	"time"
)

// TestSlowTopicPaceReadsItsOwnRate (review helper-185, fixed; this
// describes the code before the fix: a window is now read once it holds
// paceEnds ends, or is paceMaxWindow long).
//
// Defect: handlerPace.note (streamer/inflight.go) reads a pace over windows
// of paceWindow (100 ms) and takes it "up at once" (max of the window's
// instant rate and the decayed reading). For a consumer slower than 10
// jobs/s, a window in which ONE job ended reads 1/100 ms = 10/s, and the
// reading then decays with a 10 s time constant, so a role that finishes 2
// jobs a second (one every 500 ms, recounted every 100 ms as the streamer
// does) is read at ~9.5/s: topicRoom gives its topic 19 unextended
// references with a 4 s lease (half a lease at 9.5/s) instead of 4 (half a
// lease at 2/s), i.e. ~9.5 s of the role's work waiting behind a 4 s lease.
// Where those references wait unextended (one or two per message, as the
// rate-limited claims of claimApart publish them), they expire and the
// reaper counts them as attempts: see
// tests/sharedrouting_limits_test.go
// TestRateLimitedSlowRoleBurnsAttempts.
//
// Expected: a topic finishing 2 jobs/s reads about 2/s (well under 4/s),
// and its room is about half a lease at that pace (4 here).
func TestSlowTopicPaceReadsItsOwnRate(t *testing.T) {
	t.Parallel()
	f := newInFlight(5000, 100*time.Millisecond, 4*time.Second, 4, 100)
	tp := &topicPace{}
	f.topics["t"] = tp
	start := time.Now()
	// A role with a steady backlog: 4 leased at every recount, one of
	// them finishes every 500 ms and is replaced by a new lease this
	// streamer published; recounts every 100 ms for 20 s.
	tp.pace.note(4, start)
	for i := 1; i <= 200; i++ {
		now := start.Add(time.Duration(i) * 100 * time.Millisecond)
		if i%5 == 0 { // one ended, one more published since the last recount
			tp.pace.mine++
		}
		tp.pace.note(4, now)
	}
	room, per := f.topicRoom("t")
	t.Logf("pace read %.2f/s, room %d, %s a job", tp.pace.perSecond, room, per)
	if tp.pace.perSecond > 4 || room > 8 {
		t.Errorf("a topic finishing 2 jobs/s reads %.2f jobs/s and gets room for %d unextended references with a 4 s lease "+
			"(half a lease at 2/s is 4): one end in a 100 ms window reads as 10/s", tp.pace.perSecond, room)
	}
}
