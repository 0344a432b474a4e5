package streamer

import (
	"testing"
	"time"
)

// TestPaceTwoGroupsReadAsSpike (review helper-189, fixed; this describes
// the code before the fix).
//
// Defect: handlerPace.note (streamer/inflight.go:160, 167) reads a window
// once it holds max(paceEnds, started) ends over paceWindow, where started
// is what was leased when the window started. A window starts at a reading,
// and a reading taken at the ends of one group of attempts starts the next
// window with started = only the group still running: when that group ends
// 200 ms later its paceEnds ends are read over 200 ms, "up at once".
// Here: a handler of concurrency 8 with 8 s jobs (1 job/s at most); its
// jobs arrive as two groups of 4, 200 ms apart (two webhook deliveries),
// every 10 s. Group A's ends close the window that began idle (4 ends in
// 8 s, 0.5/s), the next window starts with started = 4 (group B), and B's 4
// ends 200 ms later are read as 4/0.2 s = 20 jobs/s. capOf then gives the
// handler 20 × 30 s = 600 unextended references with the default 60 s lease
// where its consumers start 30 in half a lease: a backlog arriving now is
// leased 600 deep and ~540 of those references wait in the bus past their
// lease and are counted as attempts by the reaper (docs/pipeline.md step 2
// promises the opposite).
//
// Expected: the pace reads about 1/s (under 2/s), capOf about 30.
func TestPaceTwoGroupsReadAsSpike(t *testing.T) {
	t.Parallel()
	const lease = 60 * time.Second
	f := newInFlight(5000, 100*time.Millisecond, lease, 4, 100)
	p := f.paceOf("h")
	start := time.Now()
	type job struct{ leasedAt, endAt time.Duration }
	var jobs []job
	// Every 10 s: 4 jobs at +0 and 4 at +200 ms, each running 8 s at once
	// (concurrency 8). The first time only the first group, so the pace is
	// read (0.5/s: room for 15) before 8 are leased together, as the floor
	// (4) allows no more before the first reading.
	for c := time.Duration(0); c < 60*time.Second; c += 10 * time.Second {
		offs := []time.Duration{50 * time.Millisecond, 250 * time.Millisecond}
		if c == 0 {
			offs = offs[:1]
		}
		for _, off := range offs {
			for i := 0; i < 4; i++ {
				jobs = append(jobs, job{c + off, c + off + 8*time.Second})
			}
		}
	}
	maxPace, maxCap := 0.0, 0
	var at time.Duration
	for at = 0; at <= 60*time.Second; at += 100 * time.Millisecond {
		leased := 0
		for _, j := range jobs {
			if j.leasedAt <= at && j.endAt > at {
				leased++
			}
			// leased by this streamer since the last recount
			if j.leasedAt <= at && j.leasedAt > at-100*time.Millisecond {
				p.mine++
			}
		}
		p.note(leased, start.Add(at))
		if at < 10*time.Second && p.measured && f.capOf("h") < 8 {
			t.Fatalf("setup: cap %d after the first reading, the second group would not be leased", f.capOf("h"))
		}
		if p.perSecond > maxPace {
			maxPace, maxCap = p.perSecond, f.capOf("h")
		}
	}
	t.Logf("highest pace read %.2f jobs/s (true at most 1/s), cap then %d", maxPace, maxCap)
	if maxPace > 2 || maxCap > 60 {
		t.Errorf("a handler of concurrency 8 and 8 s jobs (1/s at most), its jobs arriving as two groups of 4 200 ms apart, "+
			"is read at %.1f jobs/s and may hold %d unextended references with a %s lease (half a lease at 1/s: 30)",
			maxPace, maxCap, lease)
	}
}
