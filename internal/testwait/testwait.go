// Package testwait is how tests wait for something to happen: poll a check
// until it holds, and fail with what it last saw when it never does. A test
// that sleeps "long enough" instead is slow when the machine is idle and
// flaky when it is loaded; a wait on the thing itself is neither.
//
//	testwait.Eventually(t, 10*time.Second, "the job completed", func() (bool, string) {
//		j := b.Job(t, id)
//		return j.Status == "completed", "status " + j.Status
//	})
//
// Consistently is the other half: proving something does not happen within a
// window. There the window is the point of the test, so it is waited out in
// full, checking all along.
package testwait

import (
	"testing"
	"time"
)

// Polling starts fast, so a check that is already nearly true costs a few
// milliseconds, and backs off so a slow one does not flood its source.
const (
	firstPoll = 2 * time.Millisecond
	maxPoll   = 50 * time.Millisecond
)

// Eventually calls check until it reports ok, and fails the test when within
// passes first, naming what was awaited and what check last saw. check runs
// on the test's goroutine, so it may call t.Fatal itself.
func Eventually(t testing.TB, within time.Duration, what string, check func() (ok bool, seen string)) {
	t.Helper()
	deadline := time.Now().Add(within)
	poll := firstPoll
	for {
		ok, seen := check()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s; last saw: %s", within, what, seen)
		}
		time.Sleep(poll)
		poll = min(2*poll, maxPoll)
	}
}

// Consistently calls check throughout window and fails the test as soon as
// it reports !ok, naming what should have held and what check saw.
func Consistently(t testing.TB, window time.Duration, what string, check func() (ok bool, seen string)) {
	t.Helper()
	deadline := time.Now().Add(window)
	for {
		ok, seen := check()
		if !ok {
			t.Fatalf("within %s: %s no longer held; saw: %s", window, what, seen)
		}
		if !time.Now().Before(deadline) {
			return
		}
		time.Sleep(min(maxPoll, time.Until(deadline)))
	}
}
