package consumers

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// A reference waiting for a slot is given back only when every slot is held
// by an attempt whose handler was called and has run past its Timeout by
// more than an honest one may (review helper-283): a free slot, a slot
// whose attempt has not called its handler yet (reading its event, waiting
// for a transaction slot), or one within its Timeout and hang limit, frees
// in its time.
func TestSlotsHungOnlyWhenEverySlotIsPastItsLimit(t *testing.T) {
	t.Parallel()
	const extend = time.Second
	plain := Handler{Timeout: 10 * time.Second, Concurrency: 2}
	tx := Handler{Timeout: 10 * time.Second, Concurrency: 2, TxFunc: func(context.Context, pgx.Tx, *Event) error { return nil }}
	if got := slotWaitBound(plain, extend); got != 11*time.Second {
		t.Errorf("slotWaitBound(plain) = %s, want the Timeout and a LeaseExtend (11s)", got)
	}
	if got, want := slotWaitBound(tx, extend), txHoldLimit(tx.Timeout, extend); got != want {
		t.Errorf("slotWaitBound(transactional) = %s, want txHoldLimit's %s (its completion, commit and rollback too)", got, want)
	}
	if got := slotWaitBound(Handler{Timeout: maxTimeout}, math.MaxInt64); got != math.MaxInt64 {
		t.Errorf("slotWaitBound with a huge LeaseExtend = %s, want it saturated", got)
	}

	now := time.Now()
	for _, c := range []struct {
		name      string
		h         Handler
		deadlines []time.Time // of the attempts holding slots; zero: handler not called yet
		want      bool
	}{
		{"a slot free", plain, []time.Time{now.Add(-time.Hour)}, false},
		{"every slot hung", plain, []time.Time{now.Add(-time.Hour), now.Add(-extend - time.Millisecond)}, true},
		{"one within its LeaseExtend past the Timeout", plain, []time.Time{now.Add(-time.Hour), now.Add(-extend / 2)}, false},
		{"one within its Timeout", plain, []time.Time{now.Add(-time.Hour), now.Add(time.Second)}, false},
		{"one not called yet", plain, []time.Time{now.Add(-time.Hour), {}}, false},
		{"transactional, committing", tx, []time.Time{now.Add(-time.Hour), now.Add(-extend - time.Second)}, false},
		{"transactional, past its commit and rollback", tx, []time.Time{now.Add(-time.Hour), now.Add(-recordTimeout - giveBackTimeout - extend - time.Millisecond)}, true},
		{"a huge Timeout", plain, []time.Time{now.Add(math.MaxInt64), now.Add(math.MaxInt64)}, false},
	} {
		r := &runner{h: c.h, slots: make(chan struct{}, c.h.Concurrency), hangLimit: slotHangLimit(c.h, extend)}
		var releases []func()
		for _, d := range c.deadlines {
			hold, release := r.hold()
			if !d.IsZero() {
				hold.deadline.Store(deadlineNanos(d))
			}
			releases = append(releases, release)
		}
		if got := r.slotsHung(now); got != c.want {
			t.Errorf("%s: slotsHung = %v, want %v", c.name, got, c.want)
		}
		releases[0]()
		if r.slotsHung(now) {
			t.Errorf("%s: slotsHung with a slot released, want false", c.name)
		}
	}
}
