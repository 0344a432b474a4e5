package streamer

import (
	"testing"
	"time"
)

// TestPaceFastHandlerDecaysWhileBusy (review helper-189, fixed; this
// describes the code before the fix).
//
// Defect: since 93114fb handlerPace.note (streamer/inflight.go:147-149,
// 160-161) reads a window only once it holds as many ends as were leased at
// its start, or once it is half a lease long, and decays the pace (10 s
// time constant) at every recount in between. A handler held at its cap
// (pace × lease/2) has, by construction, about half a lease of work leased,
// so its window needs half a lease of ends: it is read only every half a
// lease (30 s with the default 60 s lease), and in between its pace decays
// by up to e^-3 (to 5%) while its consumers finish 100 jobs/s all along.
// Its room shrinks from 3000 to ~150 (1.5 s of its work), the handler is
// reported full (f.full: unext >= capOf) and then claimed apart in small
// batches (room < batch) — a fast handler held back while busy, which
// docs/pipeline.md step 2 says does not happen ("a fast handler turns its
// leases over within a recount or two, so it is read as soon as before").
//
// Simulated: 100 jobs/s consumers, jobs that take ~no time (leased ≈
// unextended), a streamer that leases up to capOf before every recount
// (100 ms), for 3 minutes.
//
// Expected: once read, capOf stays near 100/s × 30 s = 3000 (at least
// half of it) while the handler finishes 100/s.
func TestPaceFastHandlerDecaysWhileBusy(t *testing.T) {
	t.Parallel()
	const lease = 60 * time.Second
	const rate = 100 // jobs/s the consumers finish
	f := newInFlight(5000, 100*time.Millisecond, lease, 4, 100)
	p := f.paceOf("h")
	start := time.Now()
	waiting := 0 // leased, not yet finished
	minCap, minAt := 1<<30, time.Duration(0)
	fullFor := time.Duration(0)
	for at := time.Duration(0); at <= 180*time.Second; at += 100 * time.Millisecond {
		// the streamer's claims since the last recount: up to the cap
		// (the floor before the first reading)
		room := f.capOf("h") - waiting
		if room > 0 {
			waiting += room
			p.mine += room
		}
		// the consumers finish rate/10 jobs in 100 ms
		waiting -= min(waiting, rate/10)
		p.note(waiting, start.Add(at))
		f.unext["h"], f.counts["h"] = waiting, waiting
		if at >= 40*time.Second && p.measured {
			c := f.capOf("h")
			if c < minCap {
				minCap, minAt = c, at
			}
			if c < rate*int(lease/time.Second)/4 {
				fullFor += 100 * time.Millisecond
			}
		}
	}
	t.Logf("lowest cap %d at %s (steady value %d); cap under half of it for %s of 140 s; pace now %.1f",
		minCap, minAt, rate*int(lease/time.Second)/2, fullFor, p.perSecond)
	if minCap < rate*int(lease/time.Second)/4 {
		t.Errorf("a handler finishing %d jobs/s all along has its room cut to %d unextended leases (%.1f s of its work, "+
			"half a lease is %d) for %s of 140 s: its pace decays between readings taken only every half lease",
			rate, minCap, float64(minCap)/rate, rate*int(lease/time.Second)/2, fullFor)
	}
}
