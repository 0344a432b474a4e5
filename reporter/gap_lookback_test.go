package reporter

import (
	"slices"
	"testing"
	"time"
)

// TestLookBackKeepsKnownGapsBelowTheLookback: the gaps of a start from a
// cursor (taking the lead again, going back after a restore) are the
// restartLookback ids below it, aged from now, and the parts of the gaps
// known before that lie below those, with their ages; the parts within
// the lookback or above the cursor are not kept twice (runs stay
// disjoint). With the memory full, known gaps are dropped, not the
// lookback.
func TestLookBackKeepsKnownGapsBelowTheLookback(t *testing.T) {
	t.Parallel()
	now := time.Now()
	old := now.Add(-time.Minute)
	known := []gap{
		{lo: 10, hi: 20, since: old},     // far below: kept as it is
		{lo: 3990, hi: 4010, since: old}, // across the lookback's start: cut
		{lo: 4500, hi: 4600, since: old}, // within the lookback: its part
		{lo: 5200, hi: 5300, since: old}, // above the cursor: read again
		{lo: 3000, hi: 3000, since: old}, // a single id
	}
	got, dropped := lookBack(known, 5000, now)
	want := []gap{
		{lo: 4000, hi: 4999, since: now},
		{lo: 10, hi: 20, since: old},
		{lo: 3990, hi: 3999, since: old},
		{lo: 3000, hi: 3000, since: old},
	}
	if dropped != 0 || !slices.Equal(got, want) {
		t.Fatalf("lookBack = %v (dropped %d), want %v", got, dropped, want)
	}

	if got, _ := lookBack(nil, 1, now); len(got) != 0 {
		t.Errorf("lookBack from cursor 1 = %v, want no gap", got)
	}
	if got, _ := lookBack([]gap{{lo: 1, hi: 5, since: old}}, 300, now); !slices.Equal(got, []gap{{lo: 1, hi: 299, since: now}}) {
		t.Errorf("lookBack from cursor 300 = %v, want the ids below it once", got)
	}

	full := make([]gap, maxGaps)
	for i := range full {
		full[i] = gap{lo: int64(2*i + 1), hi: int64(2*i + 1), since: old}
	}
	got, dropped = lookBack(full, 100_000, now)
	if got[0] != (gap{lo: 99_000, hi: 99_999, since: now}) || len(got) != maxGaps || dropped != 1 {
		t.Errorf("with %d gaps known: first %v, %d runs, %d dropped; want the lookback first, %d runs, 1 dropped",
			maxGaps, got[0], len(got), dropped, maxGaps)
	}
}
