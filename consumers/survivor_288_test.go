package consumers

import (
	"testing"
	"time"

	"github.com/inlet-dev/inlet/consumers/bus"
)

// TestSurvivor288_SlotWaitExpiryQuarterRule: a waiting reference whose lease
// reads on this host's clock as more than 1.25 times its own length left is
// read as run out (the first extension tried at once); up to 1.25 times, as
// its length (slotWaitExpiry, review helper-270).
// Mutant (helper-288): consumers/service.go:810, `case l > length+length/4`
// -> `case l > length+length/2` (the 1.5x rule). Existing tests missed it:
// TestSlotWaitExpiryIsBoundedByTheLeasesLength reads leases 10 s (69 s of
// 60: below both) and 10 min ahead (above both), nothing between 1.25x and
// 1.5x. Here a 60 s lease read with 80 s left (the database 20 s ahead)
// is past the rule, and one with 74 s left (14 s ahead) is within it.
func TestSurvivor288_SlotWaitExpiryQuarterRule(t *testing.T) {
	t.Parallel()
	now := time.Now()
	const lease, extend = time.Minute, 2 * time.Minute
	ref := func(skew time.Duration) bus.Ref {
		leasedAt := now.Add(skew).Round(0) // the database's clock: no monotonic reading
		return bus.Ref{LeasedAt: leasedAt, LeaseExpiresAt: leasedAt.Add(lease)}
	}
	for _, c := range []struct {
		name string
		skew time.Duration
		want time.Duration
	}{
		{"database 20 s ahead: 80 s left of a 60 s lease, past 1.25x", 20 * time.Second, 0},
		{"database 16 s ahead: 76 s left, past 1.25x", 16 * time.Second, 0},
		{"database 14 s ahead: 74 s left, within 1.25x", 14 * time.Second, lease},
	} {
		got := slotWaitExpiry(now, extend, []bus.Ref{ref(c.skew)})
		if d := got.Sub(now); d < c.want-time.Millisecond || d > c.want+time.Millisecond {
			t.Errorf("%s: the lease runs out in %s, want %s", c.name, d, c.want)
		}
	}
}
