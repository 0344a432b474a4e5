package streamer

import (
	"testing"
	"time"
)

// A topic of a routed handler is paced as a handler is (half a lease at its
// pace, at least the floor), and its leases are counted against the
// recount's snapshot time: one leased before it is in the count already,
// so publishing it adds nothing and deferring it takes it back out; one
// leased after it is not, so publishing adds it and deferring changes
// nothing. Counted twice, leases read as jobs the role finished, and the
// pace read high leased more than the role starts.
func TestTopicPaceCountsEachLeaseOnce(t *testing.T) {
	t.Parallel()
	f := newInFlight(5000, time.Hour, 4*time.Second, 4, 100)
	room, per := f.topicRoom("t")
	if room != 4 || per != 0 {
		t.Fatalf("room of a topic not counted yet: %d, %s; want the floor 4 and no pace", room, per)
	}
	counted := time.Now()
	tp := &topicPace{counted: counted, unext: 10}
	f.topics["t"] = tp
	tp.pace.note(10, counted)

	f.topicPublished("t", counted.Add(-time.Millisecond)) // in the count
	if tp.pace.mine != 0 || tp.unext != 10 {
		t.Fatalf("a lease the recount counted, published: mine %d, unext %d; want 0, 10", tp.pace.mine, tp.unext)
	}
	f.topicPublished("t", counted.Add(time.Millisecond)) // after it
	if tp.pace.mine != 1 || tp.unext != 11 {
		t.Fatalf("a lease after the recount, published: mine %d, unext %d; want 1, 11", tp.pace.mine, tp.unext)
	}
	f.topicDeferred("t", counted.Add(-time.Millisecond)) // counted, then given back
	if tp.pace.mine != 0 || tp.unext != 10 {
		t.Fatalf("a lease the recount counted, deferred: mine %d, unext %d; want 0, 10", tp.pace.mine, tp.unext)
	}
	f.topicDeferred("t", counted.Add(time.Millisecond)) // never counted nor published
	if tp.pace.mine != 0 || tp.unext != 10 {
		t.Fatalf("a lease after the recount, deferred: mine %d, unext %d; want 0, 10", tp.pace.mine, tp.unext)
	}
	// 11 ended in the next second: the 10 counted and 1 published since,
	// none leased at the next recount.
	f.topicPublished("t", counted.Add(time.Millisecond))
	tp.pace.note(0, counted.Add(time.Second))
	if got := tp.pace.perSecond; got < 10.9 || got > 11.1 {
		t.Fatalf("pace after 11 leases ended in 1 s: %.2f/s, want 11/s", got)
	}
	tp.unext = 0
	room, per = f.topicRoom("t")
	if room != 22 || per < 90*time.Millisecond || per > 91*time.Millisecond {
		t.Fatalf("room at 11/s with a 4 s lease: %d, %s; want 22 (half a lease), 1/11 s a job", room, per)
	}
}

// Deferred references come back one job's time after another, chained
// across claims, at most a lease ahead; while the topic's pace is not
// read they come back soon and unchained. Each is a delay from now (on
// this process's monotonic clock), which DeferJobs adds to the database's
// now(): never a due time on this host's wall clock (review helper-270).
func TestTopicDeferSpreadsAtThePace(t *testing.T) {
	t.Parallel()
	f := newInFlight(5000, time.Hour, 4*time.Second, 4, 100)
	now := time.Now()
	if got := f.topicDefer("t", 0, now); got != paceMaxWindow {
		t.Fatalf("deferred with no pace: due in %s, want %s", got, paceMaxWindow)
	}
	if got := f.topicDefer("t", 0, now); got != paceMaxWindow {
		t.Fatalf("deferred again with no pace: due in %s, want %s (unchained)", got, paceMaxWindow)
	}
	per := 50 * time.Millisecond
	for i := 1; i <= 3; i++ {
		if got := f.topicDefer("t", per, now); got != time.Duration(i)*per {
			t.Fatalf("deferral %d: due in %s, want %s", i, got, time.Duration(i)*per)
		}
	}
	soon := now.Add(60 * time.Millisecond) // the chain is 90 ms ahead of it
	if got := f.topicDefer("t", per, soon); got != 4*per-60*time.Millisecond {
		t.Fatalf("deferral 60 ms later: due in %s, want %s (after the chain's last)", got, 4*per-60*time.Millisecond)
	}
	later := now.Add(time.Second) // the chain is behind: start from now
	if got := f.topicDefer("t", per, later); got != per {
		t.Fatalf("deferral after the chain ran out: due in %s, want %s", got, per)
	}
	if got := f.topicDefer("t", time.Hour, later); got != 4*time.Second {
		t.Fatalf("deferral of an hour: due in %s, want the lease, 4s", got)
	}
	if got := f.topicDefer("t", per, later); got != 4*time.Second {
		t.Fatalf("deferral behind one at the limit: due in %s, want the lease, 4s", got)
	}
}
