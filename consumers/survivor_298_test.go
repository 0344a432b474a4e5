package consumers_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/internal/testwait"
)

// TestSurvivor298_EveryLaterReferenceOfAMessageIsGivenBackFromHungSlots
// (mutation run, helper-298).
// Guarantee (1cd31cc, review helper-283): references of a message that wait
// for a slot behind a handler whose every slot is hung are all given back,
// uncounted, once they have waited the bound, also when they are the rest
// of a message whose first reference took the slot that then hung: left
// leased, their leases run out and the reaper counts attempts that never
// ran (and keeps the circuit's probe waiting until then).
// Mutant: consumers/service.go:678 (at 2be9df6), in read's branch for a message's later
// references (i > 0), giveBackHung(r, mine[i:i+1]) instead of mine[i:]:
// only the first waiting reference is given back, the others are dropped
// with their jobs still leased.
// Why missed: TestReferencesWaitingBehindHungSlotsAreGivenBack publishes
// the waiting references in a message of their own, so they are its first
// references (i == 0), whose branch gives back all of mine; no test had a
// message whose first reference itself hung its slot. Here one message
// carries three references: the first hangs the only slot, the other two
// wait behind it.
func TestSurvivor298_EveryLaterReferenceOfAMessageIsGivenBackFromHungSlots(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	w := newSlotWaitBench(t, 3, func(_ context.Context, first bool) error {
		if first {
			started <- struct{}{}
			<-release // hangs, ignoring its context
		}
		return nil
	})
	t.Cleanup(func() { close(release) }) // before Stop: the hung call returns
	w.publish(t, w.ids[0], w.ids[1], w.ids[2])
	select {
	case <-started:
	case <-time.After(wait):
		t.Fatal("the hanging attempt never started")
	}
	published := time.Now()
	for _, id := range w.ids[1:] {
		testwait.Eventually(t, 2*wait, fmt.Sprintf("job %d given back", id), func() (bool, string) {
			j := w.b.Job(t, id)
			return j.Status == "pending", fmt.Sprintf("%s, attempt_count %d, %s after the first reference hung its slot", j.Status, j.AttemptCount, time.Since(published))
		})
		if j := w.b.Job(t, id); j.AttemptCount != 0 || w.callsOf(id) != 0 {
			t.Errorf("job %d given back with attempt_count %d, handler called %d times; want the attempt not counted and the handler not called",
				id, j.AttemptCount, w.callsOf(id))
		}
	}
}

// TestSurvivor298_ReferenceReachingAllHungSlotsWaitsTheBound (mutation run,
// helper-298).
// Guarantee (slotWaitBound's doc): a reference delivered to a process whose
// slots are all hung already waits the whole bound (the handler's Timeout
// and a LeaseExtend) before it is given back, so a job given back comes
// round to such a process at most once per bound and never spins between
// the streamer and a hung process.
// Mutant: consumers/service.go:762 (at 2be9df6), waitForSlot's
// `time.Since(began) >= r.waitBound && r.slotsHung(...)` made
// `r.slotsHung(...)`: a reference is given back at its first look (the
// first lease extension's time, ~LeaseExtend/2) once every slot is hung.
// Why missed: TestReferencesWaitingBehindHungSlotsAreGivenBack publishes
// its references just after the slot's handler was called, so the slot
// itself becomes hung only about a bound later; its lower bound on the
// wait holds under the mutant too, give or take one look's phase. Here the
// reference arrives after the slot has been hung for a while.
func TestSurvivor298_ReferenceReachingAllHungSlotsWaitsTheBound(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	w := newSlotWaitBench(t, 2, func(_ context.Context, first bool) error {
		if first {
			started <- struct{}{}
			<-release // hangs, ignoring its context
		}
		return nil
	})
	t.Cleanup(func() { close(release) }) // before Stop: the hung call returns
	w.publish(t, w.ids[0])
	select {
	case <-started:
	case <-time.After(wait):
		t.Fatal("the hanging attempt never started")
	}
	// The slot is hung 1.3 s after the handler was called (its Timeout, 1 s,
	// and a LeaseExtend, 300 ms); wait well past it.
	time.Sleep(2500 * time.Millisecond)
	published := time.Now()
	w.publish(t, w.ids[1])
	testwait.Eventually(t, 2*wait, fmt.Sprintf("job %d given back", w.ids[1]), func() (bool, string) {
		j := w.b.Job(t, w.ids[1])
		return j.Status == "pending", fmt.Sprintf("%s, attempt_count %d, %s after it was published", j.Status, j.AttemptCount, time.Since(published))
	})
	if took := time.Since(published); took < 1300*time.Millisecond {
		t.Errorf("a reference delivered while every slot was hung was given back %s after it was published; "+
			"want no sooner than the bound (the handler's Timeout and a LeaseExtend, 1.3 s), so it does not spin between the streamer and the hung process", took)
	}
}
