//go:build knownlimits

package consumers_test

import "testing"

// Known limit (kept failing on purpose, under the knownlimits tag; found by
// review helper-103),
// the same loss one step further back: references the transport has already
// handed to this process (natsbus: pulled into the client, up to
// PullMaxMessages(64) messages of up to 32 references, consumers/bus/natsbus/
// nats.go:364, and the one message deliver blocks on while sending to the
// reader, nats.go:321) but that the reader has not taken, because it is
// still handing out an earlier message's references (waitForSlot,
// consumers/service.go:363), have nobody extending their leases. The earlier
// message's waiting references are extended (helper-85's fix); these are
// not, so under the same slow handler the reaper counts an attempt for each
// of them (the consumer is alive) and dead-letters it on its last attempt,
// without the handler ever being called. The helper-85 test
// (tests/queuedlease_test.go) passes only because its 32 jobs fit in ONE
// message; a 33rd job fails the same way.
//
// Here: concurrency 1, lease 1.5 s; message 1 = [A, B] with A running ~3 s
// (B waits in waitForSlot and is extended), message 2 = [C] is delivered to
// this process and waits behind B. After the leases' expiry the reaper runs.
//
// Expected: C, held by this live consumer, keeps its lease like B and
// completes after A and B. Actual: B is still leased (extended) but C is
// dead_letter (lease_expired), its handler never called.
//
// Suggested fix: extend the leases of every reference the process holds but
// has not started, not only the rest of the message at hand: e.g. the reader
// keeps taking messages while it waits for slots (acking none until a
// reference starts) and extends all their references in waitForSlot's one
// round trip; or pull at most one message ahead (PullMaxMessages(1)) and
// bound what the streamer leases per handler by what its consumers can start
// within a lease.
func TestKnownLimitReferencesBehindAWaitingMessageKeepTheirLeases(t *testing.T) {
	t.Parallel()
	w := newSlotWait(t)
	w.publish(t, w.ids[0], w.ids[1]) // [A, B]: B waits for A's slot at index 1
	w.firstStarted(t)
	w.publish(t, w.ids[2]) // [C]: delivered to this process, behind B

	w.reapPastLease(t, w.ids[2])
	bAfter, cAfter := w.b.Job(t, w.ids[1]), w.b.Job(t, w.ids[2])
	close(w.release)
	w.b.WaitJobStatus(t, w.ids[0], "completed", wait)
	if bAfter.Status != "leased" {
		t.Fatalf("control: B (index 1 of message 1, waiting in waitForSlot) was reaped too: %+v", bAfter)
	}
	w.b.WaitJobStatus(t, w.ids[1], "completed", wait)
	if cAfter.Status != "leased" {
		t.Fatalf("job %d (message 2, delivered to this live consumer behind message 1's waiting reference): "+
			"the reaper made it %s (class %s, attempts %d) while B, waiting beside it, kept its extended lease; "+
			"its handler was called %d times. Want: its lease kept while this process holds it, then completed",
			w.ids[2], cAfter.Status, deref(cAfter.LastErrorClass), cAfter.AttemptCount, w.callsOf(w.ids[2]))
	}
	w.b.WaitJobStatus(t, w.ids[2], "completed", wait)
}
