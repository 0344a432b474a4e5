package streamer

import (
	"testing"
	"time"
)

// TestPaceBurstEndsReadAsSpike (review helper-187, fixed; this describes
// the code before the fix): the estimator
// behind tests/pace_burst_test.go TestLockstepHandlerEndsReadAsSpike,
// without timing.
//
// Defect: handlerPace.note (streamer/inflight.go:141-148) reads a window
// once it is paceMaxWindow (2 s) long whatever it holds (here: nothing, the
// handler's attempts still running) and starts the next window there; when
// the handler's ends then come together (concurrency 4, jobs of 2.1 s: the
// 4 attempts a backlog starts together end together), they land in a window
// only ~100 ms long, which holds paceEnds ends and is paceWindow long, and
// are read as 4/0.1 s = 40 jobs/s, "up at once" — every cycle, since each
// burst comes 100 ms after an empty 2 s window closed. The handler runs
// 1.9 jobs/s; capOf gives it 40 × lease/2 unextended references (120 with
// a 6 s lease instead of 5), which wait in the bus past their lease and are
// counted as attempts by the reaper (docs/pipeline.md step 2 promises the
// opposite).
//
// Expected: a handler whose leases end 4 every 2.1 s (1.9/s) reads about
// 1.9/s (well under 4/s), and capOf leaves it about half a lease of work.
// Actual: 40/s, room for 120 with a 6 s lease.
func TestPaceBurstEndsReadAsSpike(t *testing.T) {
	t.Parallel()
	const lease = 6 * time.Second
	f := newInFlight(5000, 100*time.Millisecond, lease, 4, 100)
	p := f.paceOf("h")
	start := time.Now()
	// A steady backlog: 8 leased at each recount (4 running, 4 waiting);
	// every 2.1 s the 4 running end together and this streamer leases 4
	// more. Recounts every 100 ms (LeasedRecount) for 60 s.
	p.note(8, start)
	next := 2100 * time.Millisecond
	for at := 100 * time.Millisecond; at <= 60*time.Second; at += 100 * time.Millisecond {
		for next <= at {
			p.mine += 4
			next += 2100 * time.Millisecond
		}
		p.note(8, start.Add(at))
	}
	room := f.capOf("h")
	t.Logf("pace read %.2f jobs/s (true 1.90), cap %d unextended leases with a %s lease", p.perSecond, room, lease)
	if p.perSecond > 4 || room > 10 {
		t.Errorf("a handler ending 4 jobs every 2.1 s (1.9/s) is read at %.1f jobs/s and may hold %d unextended references with a %s lease "+
			"(half a lease at its pace: ~5): its ends, arriving together, are divided by the ~100 ms since an empty 2 s window was read",
			p.perSecond, room, lease)
	}
}

// TestPaceSplitBurstIsNotReadAsSpike: the ends of attempts that run
// together, split by a window's end (3 ends at one recount, the last at
// the next, as a loaded machine spreads them), are not read over the
// 100 ms the split leaves: with windows closed at 4 ends or 2 s (a3b9cf2,
// f73adac) the remainder read as 30 jobs/s for a handler of 1.9/s (seen
// under load in tests/pace_burst_test.go). A window is read once every
// lease out at its start could have ended in it.
func TestPaceSplitBurstIsNotReadAsSpike(t *testing.T) {
	t.Parallel()
	const lease = 6 * time.Second
	f := newInFlight(5000, 100*time.Millisecond, lease, 4, 100)
	p := f.paceOf("h")
	start := time.Now()
	p.note(8, start)
	next := 2100 * time.Millisecond
	owed := 0
	for at := 100 * time.Millisecond; at <= 60*time.Second; at += 100 * time.Millisecond {
		for next <= at {
			owed += 4
			next += 2100 * time.Millisecond
		}
		if owed > 0 { // 3 now, the rest at the next recount
			n := min(owed, 3)
			p.mine += n
			owed -= n
		}
		p.note(8, start.Add(at))
		if p.perSecond > 4 {
			t.Fatalf("at %s: a handler ending 4 jobs every 2.1 s (1.9/s), its ends split over two recounts, read at %.1f jobs/s",
				time.Duration(at), p.perSecond)
		}
	}
	if !p.measured || p.perSecond < 1 {
		t.Fatalf("pace %.2f (measured %v), want about 1.9/s", p.perSecond, p.measured)
	}
}
