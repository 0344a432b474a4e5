package consumers

import (
	"testing"
	"time"

	"github.com/inlet-dev/inlet/consumers/bus"
)

// What is left of a waiting reference's lease is read on this host's clock
// only as far as the lease's own length (on the database's clock) allows:
// a host whose clock is behind the database's by more than a quarter of
// the lease reads more left than the lease ever had, and tries the first
// extension at once; one behind by less is held to the lease's length; one
// in sync, or ahead (less left: earlier, never later), reads it as before
// (review helper-270).
func TestSlotWaitExpiryIsBoundedByTheLeasesLength(t *testing.T) {
	t.Parallel()
	now := time.Now()
	const lease, extend = time.Minute, 30 * time.Second
	// ref is a reference leased for lease, waited in the bus for inBus,
	// with the database's clock skew ahead of this host's.
	ref := func(skew, inBus time.Duration) bus.Ref {
		leasedAt := now.Add(skew - inBus).Round(0) // the database's clock: no monotonic reading
		return bus.Ref{LeasedAt: leasedAt, LeaseExpiresAt: leasedAt.Add(lease)}
	}
	for _, c := range []struct {
		name   string
		extend time.Duration
		refs   []bus.Ref
		want   time.Duration // after now
	}{
		{"in sync, extension first", extend, []bus.Ref{ref(0, 10*time.Second)}, extend},
		{"in sync, lease first", 2 * time.Minute, []bus.Ref{ref(0, 10*time.Second)}, 50 * time.Second},
		{"database 10 min ahead", 2 * time.Minute, []bus.Ref{ref(10*time.Minute, 10*time.Second)}, 0},
		{"database 10 s ahead", 2 * time.Minute, []bus.Ref{ref(10*time.Second, time.Second)}, lease},
		{"database 10 min behind", extend, []bus.Ref{ref(-10*time.Minute, 10*time.Second)}, -10*time.Minute + 50*time.Second},
		{"the first lease to run out", 2 * time.Minute, []bus.Ref{ref(0, time.Second), ref(0, 20*time.Second), ref(10*time.Minute, 0)}, 0},
		{"no lease token", 2 * time.Minute, []bus.Ref{{LeaseExpiresAt: now.Add(10 * time.Minute).Round(0)}}, 2 * time.Minute},
		{"no lease", extend, []bus.Ref{{}}, extend},
	} {
		got := slotWaitExpiry(now, c.extend, c.refs)
		if d := got.Sub(now); d < c.want-time.Millisecond || d > c.want+time.Millisecond {
			t.Errorf("%s: the first lease runs out in %s, want %s", c.name, d, c.want)
		}
		if !hasMonotonic(got) {
			t.Errorf("%s: the expiry %v is not on the monotonic clock", c.name, got)
		}
	}
}

// hasMonotonic reports whether t carries a monotonic clock reading.
func hasMonotonic(t time.Time) bool { return t.String() != t.Round(0).String() }
