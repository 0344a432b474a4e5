package reporter

import (
	"math/rand/v2"
	"testing"
)

// The arrival log answers, for the control plane's highest arrival number
// held after a restore, the lowest attempt id of the batches whose numbers
// it lost: the reporter goes back to just below it, so a late record (a
// batch of a low id after higher ones) is sent again too.
func TestArrivalLogGoesBackToTheLowestIDOfTheBatchesLost(t *testing.T) {
	t.Parallel()
	build := func() *arrivalLog {
		var l arrivalLog
		l.begin(10)
		l.add(13, 100) // numbers 11..13
		l.add(13, 90)  // numbered nothing (records held already): no mark
		l.add(15, 50)  // 14..15: a late record, sent as a gap record
		l.add(18, 104) // 16..18
		return &l
	}
	for _, c := range []struct {
		held            int64
		minID           int64
		ok, covered     bool
		marksLeft       int
		floorAfterwards int64
	}{
		{held: 17, minID: 104, ok: true, covered: true, marksLeft: 3, floorAfterwards: 10}, // 16..17 held: their mark cut
		{held: 15, minID: 104, ok: true, covered: true, marksLeft: 2, floorAfterwards: 10},
		{held: 14, minID: 50, ok: true, covered: true, marksLeft: 2, floorAfterwards: 10},
		{held: 13, minID: 50, ok: true, covered: true, marksLeft: 1, floorAfterwards: 10},
		{held: 10, minID: 50, ok: true, covered: true, marksLeft: 0, floorAfterwards: 10},
		{held: 9, minID: 50, ok: true, covered: false, marksLeft: 0, floorAfterwards: 9},
	} {
		l := build()
		minID, ok, covered := l.lose(c.held)
		if minID != c.minID || ok != c.ok || covered != c.covered || len(l.marks) != c.marksLeft || l.floor != c.floorAfterwards || l.acked != c.held {
			t.Errorf("lose(%d) = %d, %v, %v, marks %v, floor %d, acked %d; want %d, %v, %v, %d marks, floor %d, acked %d",
				c.held, minID, ok, covered, l.marks, l.floor, l.acked, c.minID, c.ok, c.covered, c.marksLeft, c.floorAfterwards, c.held)
		}
	}

	// After a loss the log goes on from the number held: the restored
	// control plane gives the numbers above it again.
	l := build()
	l.lose(13)
	l.add(16, 200)
	if minID, _, covered := l.lose(14); minID != 200 || !covered {
		t.Errorf("after a loss and a new batch: lose(14) = %d (covered %v), want 200", minID, covered)
	}

	// A second restore that loses numbers the first one left: the cut mark
	// still knows their batch.
	l = build()
	l.lose(14)
	if minID, ok, covered := l.lose(13); minID != 50 || !ok || !covered {
		t.Errorf("a second loss of numbers the first left: lose(13) = %d (ok %v, covered %v), want 50", minID, ok, covered)
	}

	// A log begun at a number knows nothing below it.
	var empty arrivalLog
	empty.begin(5)
	if _, ok, covered := empty.lose(3); ok || covered {
		t.Errorf("an empty log: lose below its floor = ok %v, covered %v; want neither", ok, covered)
	}
}

// The log stays within maxArrivalMarks however many batches are sent, and
// what it answers is never above the exact answer (going back less far
// would leave lost records unsent); for the newest marks it is exact.
func TestArrivalLogIsBoundedAndNeverGoesBackTooLittle(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	type batch struct{ upTo, minID int64 }
	var all []batch
	var l arrivalLog
	l.begin(0)
	upTo, id := int64(0), int64(1000)
	for range 3*maxArrivalMarks + 17 {
		upTo += 1 + rng.Int64N(5)
		id += rng.Int64N(10)
		minID := id
		if rng.IntN(50) == 0 {
			minID -= rng.Int64N(500) // a late record
		}
		all = append(all, batch{upTo, minID})
		l.add(upTo, minID)
		if len(l.marks) > maxArrivalMarks {
			t.Fatalf("%d marks, want at most %d", len(l.marks), maxArrivalMarks)
		}
	}
	exact := func(held int64) int64 {
		m := int64(-1)
		for _, b := range all {
			if b.upTo > held && (m < 0 || b.minID < m) {
				m = b.minID
			}
		}
		return m
	}
	for range 2000 {
		held := rng.Int64N(upTo)
		c := l
		c.marks = append([]arrivalMark(nil), l.marks...)
		got, ok, covered := c.lose(held)
		if !ok || !covered || got > exact(held) {
			t.Fatalf("lose(%d) = %d (ok %v, covered %v), exact %d: it must never go back less far", held, got, ok, covered, exact(held))
		}
	}
	recent := all[len(all)-maxArrivalMarks/2].upTo
	c := l
	c.marks = append([]arrivalMark(nil), l.marks...)
	if got, _, _ := c.lose(recent); got != exact(recent) {
		t.Errorf("lose(%d) among the newest marks = %d, want exactly %d", recent, got, exact(recent))
	}
}

// The acknowledged ids are kept as runs: in order, out of order, merged
// when a hole fills; missing names those of a range not read again.
func TestAckedIDRuns(t *testing.T) {
	t.Parallel()
	var s idRuns
	for _, id := range []int64{5, 6, 7, 10, 9, 3, 12, 8, 7, 1, 2} {
		s.add(id)
	}
	want := []idRun{{1, 3}, {5, 10}, {12, 12}}
	if len(s.runs) != len(want) {
		t.Fatalf("runs %v, want %v", s.runs, want)
	}
	for i := range want {
		if s.runs[i] != want[i] {
			t.Fatalf("runs %v, want %v", s.runs, want)
		}
	}
	for _, c := range []struct {
		lo, hi         int64
		present        []int64
		n, first, last int64
	}{
		{0, 20, []int64{1, 2, 3, 5, 6, 7, 8, 9, 10, 12}, 0, 0, 0},
		{0, 20, nil, 10, 1, 12},
		{2, 9, []int64{3, 5, 9, 9, 15}, 3, 6, 8},
		{3, 5, nil, 1, 5, 5},
		{10, 11, nil, 0, 0, 0},
		{0, 12, []int64{4, 11}, 10, 1, 12},
		{6, 12, []int64{7, 8, 9, 10, 12}, 0, 0, 0},
	} {
		n, first, last := s.missing(c.lo, c.hi, c.present)
		if n != c.n || first != c.first || last != c.last {
			t.Errorf("missing(%d, %d, %v) = %d from %d to %d; want %d from %d to %d", c.lo, c.hi, c.present, n, first, last, c.n, c.first, c.last)
		}
	}

	// Bounded: the lowest runs are forgotten, and ids up to them with them.
	var b idRuns
	for i := range int64(maxAckedRuns + 10) {
		b.add(2*i + 1) // every other id: each its own run
	}
	if len(b.runs) != maxAckedRuns || b.floor != 19 || b.runs[0].lo != 21 {
		t.Fatalf("%d runs from %d, floor %d; want %d from 21, floor 19", len(b.runs), b.runs[0].lo, b.floor, maxAckedRuns)
	}
	b.add(3)
	if n, _, _ := b.missing(0, 20, nil); n != 0 || b.runs[0].lo != 21 {
		t.Errorf("an id below the floor was kept: %d missing, first run from %d", n, b.runs[0].lo)
	}
}
